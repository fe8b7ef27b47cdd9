// FlowMatchEulerDiscreteScheduler as QwenImagePipeline configures and drives it (spec §2.4, §3),
// reproducing every float32/float64 rounding so sigmas and timesteps are bit-exact.
#pragma once

#include <string>
#include <vector>

#include "io/weight_store.h"

namespace ditbatch {

struct SchedulerConfig {
  int64_t num_train_timesteps = 1000;
  double shift = 1.0;
  bool use_dynamic_shifting = true;
  double base_shift = 0.5, max_shift = 0.9;
  int64_t base_image_seq_len = 256, max_image_seq_len = 8192;
  double shift_terminal = 0.02;  // 0: no stretch
  std::string time_shift_type = "exponential";
  // A diffusers scheduler_config.json (missing keys: the scheduler's __init__ defaults); rejects
  // the branches ditbatch lacks.
  static SchedulerConfig from(const Config& config);
  // Every setting that decides the schedule, for the PNG, the manifest and the resume check:
  // "FlowMatchEulerDiscrete(train_timesteps=1000, shift=1, ...)".
  std::string describe() const;
};

// The Lightning distillation's schedule (diffusers' Qwen-Image docs): base_shift = max_shift = ln 3,
// no shift_terminal, shift 1, dynamic shifting, the rest as the model's.
SchedulerConfig lightning_scheduler(const SchedulerConfig& model);

struct Schedule {
  double mu = 0.0;               // the dynamic shift for this image size
  std::vector<float> sigmas;     // N + 1 values, the last one 0
  std::vector<float> timesteps;  // N values, sigma * 1000
  int steps() const { return static_cast<int>(timesteps.size()); }
  // The transformer's time input at step i: f32(timesteps[i] / 1000), not always == sigmas[i].
  float model_time(int i) const { return timesteps[static_cast<size_t>(i)] / 1000.0f; }
  // The Euler step's dt = sigmas[i+1] - sigmas[i] (float32).
  float dt(int i) const { return sigmas[static_cast<size_t>(i) + 1] - sigmas[static_cast<size_t>(i)]; }
};

// diffusers' calculate_shift, in Python doubles (no clamping past max_image_seq_len).
double calculate_shift(int64_t image_seq_len, int64_t base_seq_len, int64_t max_seq_len, double base_shift,
                       double max_shift);
// That `config` gives a usable schedule at every image size and step count a job may ask for
// (2 and 1000 steps; 1 to 2^18 image tokens, its base and max seq lens): every sigma finite, in
// [0, 1] and none above the one before. A shift of 1e308 or 1e-30, or a dynamic shift of 800,
// passes every key's own check but makes each image NaN after all its steps: refused up front,
// naming `where`.
void check_schedule(const SchedulerConfig& config, const std::string& where);
// np.linspace(1, 1/N, N) -> set_timesteps(N, sigmas, mu) for an image of `image_seq_len` tokens.
Schedule make_schedule(const SchedulerConfig& config, int steps, int64_t image_seq_len);
// set_timesteps(sigmas=given, mu) with sigmas a pipeline gives as they are (np.float32 of them,
// then the config's shift and stretch): Qwen-Image-2.1's sample_sigmas (its Turbo checkpoint's
// 8-value grid); the steps are as many as the sigmas.
Schedule make_schedule_from_sigmas(const SchedulerConfig& config, const std::vector<double>& sigmas,
                                   int64_t image_seq_len);

}  // namespace ditbatch
