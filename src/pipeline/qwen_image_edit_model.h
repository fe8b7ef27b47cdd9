// Qwen-Image-Edit (QwenImageEditPipeline) and Edit-2509 / Edit-2511 (QwenImageEditPlusPipeline)
// behind the model seam: one family, told apart by the file's pipeline class and the
// transformer's zero_cond_t. Its configs checked, its input images' rules (how many, the output
// size they give), its GPU and host estimates with the condition tokens, the vision tower and the
// VAE encoder, its LoRA targets (the MMDiT's linears), and its pipeline
// (pipeline/qwen_image_edit_pipeline.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/edit_prompt_tokens.h"
#include "model/qwen2vl_image_processor.h"
#include "pipeline/image_model.h"

namespace ditbatch {

// Edit-Plus's "Picture k" prompts were trained for one to three images (the model cards); diffusers
// would take more, each 1024² image adding 4096 tokens to every step.
inline constexpr int kMaxEditPlusInputImages = 3;

class QwenImageEditModel final : public ImageModel {
 public:
  explicit QwenImageEditModel(const WeightStore& weights);

  std::string pipeline_class() const override;
  std::string family() const override;
  GenerationDefaults generation_defaults() const override;
  int64_t default_max_sequence_length() const override { return 0; }  // the whole prompt and its images
  int64_t max_sequence_length_limit() const override { return 0; }
  int min_input_images() const override { return 1; }
  int max_input_images() const override { return pipeline_ == EditPipeline::Edit ? 1 : kMaxEditPlusInputImages; }
  void settle_input_images(ImageJob& job) const override;
  std::vector<std::string> scheduler_presets() const override { return {"lightning"}; }
  LoraSet open_loras(const std::vector<LoraRequest>& requests) const override;
  DeviceMemoryPlan device_memory(size_t weight_dtype_size, const std::vector<ImageJob>& jobs, int64_t text_tokens,
                                 const SchedulerConfig& scheduler) const override;
  HostRunPlan host_run(const std::vector<ImageJob>& jobs, int64_t text_tokens) const override;
  std::unique_ptr<ImageGenerator> make_generator(Backend& backend, const Log& log, int64_t max_sequence_length,
                                                 std::shared_ptr<const WeightReader> reader) const override;

  // What one image's run holds and computes, from its output size and its input images' sizes
  // (an image without inputs, as inspect's estimates, is counted with one input of its own size).
  struct JobShape {
    int64_t noise_tokens = 0;      // S0: the output's packed grid
    int64_t condition_tokens = 0;  // S1 + S2 + ...: the input images' packed grids
    int64_t text_tokens = 0;       // the kept prompt rows, the image pads among them (a bound)
    int64_t vision_patches = 0;    // the vision tower's rows, all images
    int64_t largest_condition_pixels = 0;  // the largest VAE-side image, w x h
  };
  JobShape shape_of(const ImageJob& job) const;

 private:
  const WeightStore& weights_;
  EditPipeline pipeline_;
  Qwen2VLImageProcessorConfig processor_;
};

}  // namespace ditbatch
