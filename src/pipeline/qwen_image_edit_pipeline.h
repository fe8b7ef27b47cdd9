// QwenImageEditPipeline (Qwen-Image-Edit) and QwenImageEditPlusPipeline (Edit-2509, Edit-2511) on
// any backend (spec qwen-image-edit.md §3): per image, the input images resized for the prompt
// side and the VAE side; the prompt and the negative prompt each encoded with the images (the
// vision tower's rows at the image pads); the VAE side encoded to condition latents that ride
// behind the noise in the transformer's image stream; N Euler steps with true CFG; decode.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/log.h"
#include "io/weight_store.h"
#include "model/edit_image_inputs.h"
#include "model/edit_prompt_tokens.h"
#include "model/lora.h"
#include "model/qwen2vl_image_processor.h"
#include "model/qwen_vl_vision.h"
#include "model/scheduler.h"
#include "model/text_encoder.h"
#include "model/text_positions.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "model/vae.h"
#include "model/vae_encoder.h"
#include "pipeline/image_generator.h"
#include "pipeline/job.h"

namespace ditbatch {

// Which of the two pipelines a weight file's class is (an InputError for any other class).
EditPipeline edit_pipeline_of(const std::string& pipeline_class);

// The input images of one job as both sides of the pipeline take them (edit_condition_image /
// edit_plus_condition_image of each, in order), decoded from the files the run checked.
std::vector<EditConditionImage> edit_condition_images(EditPipeline pipeline, const std::vector<InputImage>& images,
                                                      const std::string& origin);

class QwenImageEditPipeline final : public ImageGenerator {
 public:
  // Opens the components; the text encoder (with its vision tower), the transformer and the VAE
  // (decoder and encoder) load on first use. `positions`: the text encoder's positions for the
  // image tokens (Sequential: what diffusers 0.42.1 with transformers 5.24 runs; MRope: what the
  // model was trained with).
  QwenImageEditPipeline(Backend& backend, const WeightStore& weights, const Log& log,
                        std::shared_ptr<const WeightReader> reader = nullptr,
                        TextPositionMode positions = TextPositionMode::Sequential);
  ~QwenImageEditPipeline() override;
  // Every config of the file, checked against the tensors it holds (the vision tower's and the
  // VAE encoder's too) and against each other, reading no tensor.
  static void check_configs(const WeightStore& weights);

  using ImageGenerator::encode_prompt;
  // The prompt's embedding with the job's images: [L, hidden], the image tokens' rows part of it.
  PromptEmbedding encode_prompt(const std::string& prompt, const std::vector<InputImage>& images,
                                StageTimes* times) override;
  void load_text_encoder() override;     // the language model and the vision tower
  void release_text_encoder() override;  // both
  // Transformer and VAE (decoder and encoder). Given the process's images, the transformer
  // conditions their timesteps while it loads, as QwenImagePipeline's (an image's schedule follows
  // from its output size and steps alone; Edit-2511's t = 0 vectors are computed then too).
  void load_denoiser() override;
  void load_denoiser(const std::vector<ImageJob>& jobs) override;
  // latents: [S0, 64], the noise latents' after the last step (the condition latents are not
  // part of them, as diffusers' output_type="latent"); rgb [H, W, 3].
  GeneratedImage generate(const ImageJob& job, const PromptEmbedding& prompt, const PromptEmbedding* negative,
                          const StepCallback& on_step, StageTimes& times) override;

  void use_loras(LoraSet loras) override;
  void use_scheduler(const SchedulerConfig& scheduler) override;
  void use_text_positions(TextPositionMode mode) override;
  TextPositionMode text_positions() const override { return positions_; }
  const LoraSet& loras() const override { return loras_; }
  const SchedulerConfig& scheduler_config() const override { return scheduler_; }
  const SchedulerConfig& model_scheduler_config() const override { return model_scheduler_; }
  int64_t max_sequence_length() const override { return 0; }  // the whole prompt, as diffusers
  Backend& backend() override { return be_; }

  // The packed condition latents of a job's images, [S1 + S2 + ..., 64] f32, and their grids.
  struct ConditionLatents {
    Tensor latents;
    std::vector<PackedGrid> grids;
  };
  ConditionLatents encode_condition_latents(const ImageJob& job);

 private:
  void load_denoiser_with(const std::optional<std::vector<ImageJob>>& jobs);
  // The job's condition images, decoded and resized once for the prompt, the negative prompt and
  // the VAE side (the last job's kept: the runner asks for them in that order).
  const std::vector<EditConditionImage>& condition_images(const std::vector<InputImage>& images,
                                                          const std::string& origin);
  // The vision tower's rows of the images' prompt side, [pads, hidden], kept for the last images.
  const Tensor& vision_rows(const std::vector<InputImage>& images, std::vector<std::array<int64_t, 3>>& grid_thw);

  Backend& be_;
  const WeightStore& weights_;
  const Log& log_;
  std::shared_ptr<const WeightReader> reader_;
  EditPipeline pipeline_;
  TextPositionMode positions_;
  Qwen2VLImageProcessorConfig processor_;
  SchedulerConfig scheduler_, model_scheduler_;
  LoraSet loras_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<QwenTextEncoder> text_encoder_;
  std::unique_ptr<QwenVisionTower> vision_;
  std::unique_ptr<QwenImageTransformer> transformer_;
  std::unique_ptr<VaeDecoder> vae_;
  std::unique_ptr<VaeEncoder> vae_encoder_;

  std::string condition_key_, vision_key_;  // the images (by sha256) the caches below hold
  std::vector<EditConditionImage> condition_images_;
  Tensor vision_rows_;
  std::vector<std::array<int64_t, 3>> vision_grids_;
};

}  // namespace ditbatch
