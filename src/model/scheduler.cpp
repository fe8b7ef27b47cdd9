#include "model/scheduler.h"

#include <cmath>

#include "core/error.h"

namespace ditbatch {

SchedulerConfig SchedulerConfig::from(const Config& comp) {
  // A key left out takes FlowMatchEulerDiscreteScheduler.__init__'s default, as from_config fills
  // it in (a weight file's config has them all; a --scheduler-config file may not).
  SchedulerConfig c;
  if (comp.has("_class_name") && comp.get_string("_class_name") != "FlowMatchEulerDiscreteScheduler")
    fail_input("{}: _class_name '{}': ditbatch runs FlowMatchEulerDiscreteScheduler only", comp.where(),
               comp.get_string("_class_name"));
  c.num_train_timesteps = comp.has("num_train_timesteps") ? comp.get_int("num_train_timesteps") : 1000;
  c.shift = comp.has("shift") ? comp.get_double("shift") : 1.0;
  c.use_dynamic_shifting = comp.has("use_dynamic_shifting") && comp.get_bool("use_dynamic_shifting");
  c.base_shift = comp.has("base_shift") ? comp.get_double("base_shift") : 0.5;
  c.max_shift = comp.has("max_shift") ? comp.get_double("max_shift") : 1.15;
  c.base_image_seq_len = comp.has("base_image_seq_len") ? comp.get_int("base_image_seq_len") : 256;
  c.max_image_seq_len = comp.has("max_image_seq_len") ? comp.get_int("max_image_seq_len") : 4096;
  // `if self.config.shift_terminal:` in diffusers: null, false and 0 all mean no stretch.
  c.shift_terminal = 0.0;
  if (comp.has("shift_terminal") && !(comp.json()["shift_terminal"].is_boolean() && !comp.get_bool("shift_terminal"))) {
    c.shift_terminal = comp.get_double("shift_terminal");
    if (!(c.shift_terminal >= 0.0 && c.shift_terminal < 1.0))
      fail_input("{}: shift_terminal {} must be in [0, 1) (or null)", comp.where(), c.shift_terminal);
  }
  c.time_shift_type = comp.has("time_shift_type") ? comp.get_string("time_shift_type") : "exponential";
  if (c.time_shift_type != "exponential" && c.time_shift_type != "linear")
    fail_input("{}: time_shift_type '{}' (expected exponential or linear)", comp.where(), c.time_shift_type);
  for (const char* key : {"invert_sigmas", "use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                          "stochastic_sampling"})
    if (comp.has(key) && comp.get_bool(key))
      fail_input("{}: {} = true is not implemented by ditbatch's scheduler", comp.where(), key);
  if (c.num_train_timesteps <= 0) fail_input("{}: num_train_timesteps must be positive", comp.where());
  if (!std::isfinite(c.shift) || c.shift <= 0) fail_input("{}: shift {} must be positive", comp.where(), c.shift);
  if (c.max_image_seq_len == c.base_image_seq_len)  // QwenImagePipeline's calculate_shift divides by their difference
    fail_input("{}: max_image_seq_len = base_image_seq_len = {} divides by 0 in the shift", comp.where(),
               c.base_image_seq_len);
  return c;
}

SchedulerConfig lightning_scheduler(const SchedulerConfig& model) {
  SchedulerConfig c = model;
  c.base_shift = c.max_shift = std::log(3.0);  // math.log(3): a constant mu, shift 3 at every size
  c.shift_terminal = 0.0;
  c.shift = 1.0;
  c.use_dynamic_shifting = true;
  return c;
}

std::string SchedulerConfig::describe() const {
  return fmt::format("FlowMatchEulerDiscrete(train_timesteps={}, shift={}, dynamic_shift={}, base_shift={}, "
                     "max_shift={}, base_seq={}, max_seq={}, shift_terminal={}, time_shift={})",
                     num_train_timesteps, shift, use_dynamic_shifting, base_shift, max_shift, base_image_seq_len,
                     max_image_seq_len, shift_terminal == 0.0 ? std::string("none") : fmt::format("{}", shift_terminal),
                     time_shift_type);
}

double calculate_shift(int64_t image_seq_len, int64_t base_seq_len, int64_t max_seq_len, double base_shift,
                       double max_shift) {
  // Python subtracts the ints exactly, then rounds once to a float: __int128 does the same for
  // any two int64 values (an int64 difference could overflow).
  const double m = (max_shift - base_shift) / static_cast<double>(static_cast<__int128>(max_seq_len) - base_seq_len);
  const double b = base_shift - m * static_cast<double>(base_seq_len);
  return static_cast<double>(image_seq_len) * m + b;
}

void check_schedule(const SchedulerConfig& config, const std::string& where) {
  for (const int steps : {2, 1000})
    for (const int64_t tokens : {int64_t{1}, config.base_image_seq_len, config.max_image_seq_len, int64_t{1} << 18}) {
      const Schedule s = make_schedule(config, steps, tokens);
      for (size_t i = 0; i < s.sigmas.size(); ++i)
        if (!std::isfinite(s.sigmas[i]) || s.sigmas[i] < 0.0f || s.sigmas[i] > 1.0f ||
            (i > 0 && s.sigmas[i] > s.sigmas[i - 1]))
          fail_input("{}: this scheduler config gives sigma {} = {} at {} steps for an image of {} tokens (sigmas must "
                     "be finite and fall from 1 to 0): check shift, base_shift, max_shift and shift_terminal",
                     where, i, s.sigmas[i], steps, tokens);
    }
}

Schedule make_schedule(const SchedulerConfig& c, int steps, int64_t image_seq_len) {
  if (steps < 1) fail_input("steps must be at least 1, got {}", steps);
  // np.linspace(1.0, 1/N, N) in float64: i * step + start, the last value set to stop exactly.
  const double start = 1.0, stop = 1.0 / steps;
  std::vector<double> sigmas(static_cast<size_t>(steps));
  const double step = steps > 1 ? (stop - start) / (steps - 1) : 0.0;
  for (int i = 0; i < steps; ++i) {
    double v = steps > 1 ? static_cast<double>(i) * step + start : start;
    if (i == steps - 1 && steps > 1) v = stop;
    sigmas[static_cast<size_t>(i)] = v;
  }
  return make_schedule_from_sigmas(c, sigmas, image_seq_len);
}

Schedule make_schedule_from_sigmas(const SchedulerConfig& c, const std::vector<double>& sigmas,
                                   int64_t image_seq_len) {
  if (sigmas.empty()) fail_input("a schedule needs at least one sigma");
  Schedule s;
  std::vector<float> sigma(sigmas.size());
  for (size_t i = 0; i < sigmas.size(); ++i) sigma[i] = static_cast<float>(sigmas[i]);  // .astype(np.float32)
  // The pipeline works mu out for every config; only a dynamic shift uses it.
  s.mu = calculate_shift(image_seq_len, c.base_image_seq_len, c.max_image_seq_len, c.base_shift, c.max_shift);
  if (c.use_dynamic_shifting) {
    // NumPy float32 arithmetic with Python floats as weak scalars (NEP 50): every op is float32.
    for (float& t : sigma) {
      if (c.time_shift_type == "exponential") {
        const float e = static_cast<float>(std::exp(s.mu));
        t = e / (e + (1.0f / t - 1.0f));  // (1/t - 1) ** 1.0 is the identity
      } else {
        const float m = static_cast<float>(s.mu);
        t = m / (m + (1.0f / t - 1.0f));
      }
    }
  } else {
    // shift * sigmas / (1 + (shift - 1) * sigmas): shift - 1 in Python doubles, then float32
    const float shift = static_cast<float>(c.shift), shift_minus_one = static_cast<float>(c.shift - 1.0);
    for (float& t : sigma) t = shift * t / (1.0f + shift_minus_one * t);
  }
  if (c.shift_terminal != 0.0) {
    // stretch_shift_to_terminal with NumPy 2: scale = f32(omz[-1]) / f32(1 - shift_terminal).
    // One step gives 0/0 = NaN, exactly as diffusers does.
    std::vector<float> one_minus(sigma.size());
    for (size_t i = 0; i < sigma.size(); ++i) one_minus[i] = 1.0f - sigma[i];
    const float scale = one_minus.back() / static_cast<float>(1.0 - c.shift_terminal);
    for (size_t i = 0; i < sigma.size(); ++i) sigma[i] = 1.0f - one_minus[i] / scale;
  }
  const float train = static_cast<float>(c.num_train_timesteps);
  for (float t : sigma) {
    s.sigmas.push_back(t);
    s.timesteps.push_back(t * train);
  }
  s.sigmas.push_back(0.0f);
  return s;
}

}  // namespace ditbatch
