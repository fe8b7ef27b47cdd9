#include "model/scheduler.h"

#include <cmath>

#include "core/error.h"

namespace ditbatch {

SchedulerConfig SchedulerConfig::from(const Config& comp) {
  SchedulerConfig c;
  c.num_train_timesteps = comp.get_int("num_train_timesteps");
  c.shift = comp.get_double("shift");
  c.use_dynamic_shifting = comp.get_bool("use_dynamic_shifting");
  if (comp.has("base_shift")) c.base_shift = comp.get_double("base_shift");
  if (comp.has("max_shift")) c.max_shift = comp.get_double("max_shift");
  if (comp.has("base_image_seq_len")) c.base_image_seq_len = comp.get_int("base_image_seq_len");
  if (comp.has("max_image_seq_len")) c.max_image_seq_len = comp.get_int("max_image_seq_len");
  c.shift_terminal = comp.has("shift_terminal") ? comp.get_double("shift_terminal") : 0.0;
  if (comp.has("time_shift_type")) c.time_shift_type = comp.get_string("time_shift_type");
  if (c.time_shift_type != "exponential" && c.time_shift_type != "linear")
    fail_input("{}: time_shift_type '{}' (expected exponential or linear)", comp.where(), c.time_shift_type);
  for (const char* key : {"invert_sigmas", "use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                          "stochastic_sampling"})
    if (comp.has(key) && comp.get_bool(key))
      fail_input("{}: {} = true is not implemented by ditbatch's scheduler", comp.where(), key);
  if (c.num_train_timesteps <= 0) fail_input("{}: num_train_timesteps must be positive", comp.where());
  return c;
}

std::string SchedulerConfig::describe() const {
  return fmt::format("FlowMatchEulerDiscrete(dynamic_shift={}, base_shift={}, max_shift={}, base_seq={}, max_seq={}, "
                     "shift_terminal={}, time_shift={})",
                     use_dynamic_shifting, base_shift, max_shift, base_image_seq_len, max_image_seq_len,
                     shift_terminal, time_shift_type);
}

double calculate_shift(int64_t image_seq_len, int64_t base_seq_len, int64_t max_seq_len, double base_shift,
                       double max_shift) {
  // Python subtracts the ints exactly, then rounds once to a float: __int128 does the same for
  // any two int64 values (an int64 difference could overflow).
  const double m = (max_shift - base_shift) / static_cast<double>(static_cast<__int128>(max_seq_len) - base_seq_len);
  const double b = base_shift - m * static_cast<double>(base_seq_len);
  return static_cast<double>(image_seq_len) * m + b;
}

Schedule make_schedule(const SchedulerConfig& c, int steps, int64_t image_seq_len) {
  if (steps < 1) fail_input("steps must be at least 1, got {}", steps);
  Schedule s;
  // np.linspace(1.0, 1/N, N) in float64: i * step + start, the last value set to stop exactly.
  const double start = 1.0, stop = 1.0 / steps;
  std::vector<float> sigma(static_cast<size_t>(steps));
  const double step = steps > 1 ? (stop - start) / (steps - 1) : 0.0;
  for (int i = 0; i < steps; ++i) {
    double v = steps > 1 ? static_cast<double>(i) * step + start : start;
    if (i == steps - 1 && steps > 1) v = stop;
    sigma[static_cast<size_t>(i)] = static_cast<float>(v);  // .astype(np.float32)
  }
  if (c.use_dynamic_shifting) {
    s.mu = calculate_shift(image_seq_len, c.base_image_seq_len, c.max_image_seq_len, c.base_shift, c.max_shift);
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
    const float shift = static_cast<float>(c.shift);
    for (float& t : sigma) t = shift * t / (1.0f + (shift - 1.0f) * t);
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
