// Qwen-Image-2.1 (QwenImage21Pipeline, incl. its Turbo checkpoint) behind the model seam: its
// configs checked, its defaults (the model card's: 1024x1024, 40 steps or Turbo's sigma grid,
// CFG off, sides floored to multiples of 32), its GPU and host estimates, its LoRA targets (the
// single-stream DiT's linears, diffusers / PEFT keys), and its pipeline
// (pipeline/qwen_image_21_pipeline.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "pipeline/image_model.h"

namespace ditbatch {

class QwenImage21Model final : public ImageModel {
 public:
  explicit QwenImage21Model(const WeightStore& weights);

  std::string pipeline_class() const override { return "QwenImage21Pipeline"; }
  std::string family() const override { return "Qwen-Image-2.1"; }
  GenerationDefaults generation_defaults() const override;
  int64_t default_max_sequence_length() const override { return 0; }  // the whole prompt, always
  int64_t max_sequence_length_limit() const override { return 0; }
  LoraSet open_loras(const std::vector<LoraRequest>& requests) const override;
  DeviceMemoryPlan device_memory(size_t weight_dtype_size, const std::vector<ImageJob>& jobs, int64_t text_tokens,
                                 const SchedulerConfig& scheduler) const override;
  HostRunPlan host_run(const std::vector<ImageJob>& jobs, int64_t text_tokens) const override;
  std::unique_ptr<ImageGenerator> make_generator(Backend& backend, const Log& log, int64_t max_sequence_length,
                                                 std::shared_ptr<const WeightReader> reader) const override;

 private:
  const WeightStore& weights_;
};

// A bound on the encoder rows a prompt of `jobs` keeps (2.1 cuts none): its UTF-8 bytes (a
// byte-level BPE token holds at least one) and the template's user turn around it.
int64_t qwen_image_21_text_token_bound(const std::vector<ImageJob>& jobs);

}  // namespace ditbatch
