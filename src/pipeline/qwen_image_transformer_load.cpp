#include "pipeline/qwen_image_transformer_load.h"

#include <set>
#include <utility>

#include "core/timer.h"
#include "model/lora_merge.h"

namespace ditbatch {

std::vector<float> conditioning_timesteps(const SchedulerConfig& scheduler, const std::vector<ImageJob>& jobs) {
  std::set<std::pair<int64_t, int64_t>> schedules;  // (image tokens, steps)
  for (const ImageJob& job : jobs) schedules.emplace(job.grid_h() * job.grid_w(), job.steps);
  std::vector<float> times;
  for (const auto& [tokens, steps] : schedules) {
    const Schedule schedule = make_schedule(scheduler, static_cast<int>(steps), tokens);
    for (int i = 0; i < schedule.steps(); ++i) times.push_back(schedule.model_time(i));
  }
  return distinct_model_times(times);
}

std::unique_ptr<QwenImageTransformer> load_qwen_image_transformer(Backend& be, const WeightStore& weights,
                                                                  const WeightReader& reader, const LoraSet& loras,
                                                                  const SchedulerConfig& scheduler,
                                                                  const std::optional<std::vector<ImageJob>>& jobs,
                                                                  const Log& log) {
  const Component dit = weights.component("transformer");
  const TransformerConfig config = TransformerConfig::from(dit.config());
  const std::vector<float> times = jobs ? conditioning_timesteps(scheduler, *jobs) : std::vector<float>{};
  const size_t weight_size = dtype_size(be.weight_dtype());
  const int64_t count = std::ssize(times);
  // The LoRAs go in as each weight is read, before the conditioning at load uses img_mod / txt_mod.
  const std::unique_ptr<WeightBinder> file_binder = reader.binder(dit);
  LoraMergingBinder binder(*file_binder, loras, reader);
  std::unique_ptr<QwenImageTransformer> transformer;
  // No image for this process (more ranks than images, a finished share) needs no conditioning either.
  if (jobs && (times.empty() || QwenImageTransformer::conditioning_at_load_pays(config, count, weight_size))) {
    transformer = std::make_unique<QwenImageTransformer>(be, config, binder, times);
    const double weight_mb = static_cast<double>(QwenImageTransformer::conditioning_weight_bytes(config, weight_size)) / 1e6;
    if (count == 0)
      log.info("no image for this process: the weights that compute the timestep conditioning ({:.1f} MB) were not kept",
               weight_mb);
    else
      log.info("timestep conditioning of {} model times computed while loading ({:.1f} MB); the weights that compute "
               "it ({:.1f} MB) were not kept",
               count, static_cast<double>(QwenImageTransformer::conditioning_bytes(config, count)) / 1e6, weight_mb);
  } else {
    if (jobs) log.info("{} distinct model times: conditioning computed per step, its weights kept", count);
    transformer = std::make_unique<QwenImageTransformer>(be, config, binder);
  }
  binder.check_all_merged();
  if (!loras.empty()) {
    const double mb = static_cast<double>(binder.merged_params()) * static_cast<double>(weight_size) / 1e6;
    log.info("LoRA: {} file(s) merged into {} linears ({:.1f} MB of weights) in {:.3f} s ({:.2f} s per GB)",
             loras.files().size(), binder.merged_modules(), mb, binder.seconds(),
             mb > 0 ? 1e3 * binder.seconds() / mb : 0.0);
  }
  return transformer;
}

}  // namespace ditbatch
