// Qwen-Image (QwenImagePipeline: Qwen-Image 1.0 and 2512) behind the model seam: its configs
// checked, its GPU and host estimates, its LoRA targets (the MMDiT's linears), and its
// pipeline (pipeline/qwen_image_pipeline.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "pipeline/image_model.h"

namespace ditbatch {

class QwenImageModel final : public ImageModel {
 public:
  explicit QwenImageModel(const WeightStore& weights);

  std::string pipeline_class() const override { return "QwenImagePipeline"; }
  std::string family() const override { return "Qwen-Image"; }
  GenerationDefaults generation_defaults() const override;
  int64_t default_max_sequence_length() const override;
  int64_t max_sequence_length_limit() const override;
  std::vector<std::string> scheduler_presets() const override { return {"lightning"}; }
  LoraSet open_loras(const std::vector<LoraRequest>& requests) const override;
  DeviceMemoryPlan device_memory(size_t weight_dtype_size, const std::vector<ImageJob>& jobs, int64_t text_tokens,
                                 const SchedulerConfig& scheduler) const override;
  HostRunPlan host_run(const std::vector<ImageJob>& jobs, int64_t text_tokens) const override;
  std::unique_ptr<ImageGenerator> make_generator(Backend& backend, const Log& log, int64_t max_sequence_length,
                                                 std::shared_ptr<const WeightReader> reader) const override;

 private:
  const WeightStore& weights_;
};

// The estimates themselves, for the tests. Device: weight_dtype_size bytes a parameter, the
// largest image width x height, text_tokens a prompt's kept tokens at most, timesteps the
// distinct model times of the run's schedules (conditioning_timesteps()). Host: all f32.
DeviceMemoryPlan qwen_image_device_memory(const WeightStore& weights, size_t weight_dtype_size, int64_t width,
                                          int64_t height, int64_t text_tokens, int64_t timesteps);
HostRunPlan qwen_image_host_run(const WeightStore& weights, const std::vector<ImageJob>& jobs, int64_t text_tokens);

}  // namespace ditbatch
