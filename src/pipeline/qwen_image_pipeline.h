// QwenImagePipeline (text-to-image) on any backend: encode the prompt and the negative prompt,
// draw the seed's noise, N Euler steps of the transformer with true CFG, unpack, de-normalise,
// VAE decode, uint8 RGB. Spec qwen-image.md §2; one image at a time, so every image is
// independent of batch composition and placement.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/log.h"
#include "io/weight_store.h"
#include "model/lora.h"
#include "model/prompt_tokens.h"
#include "model/scheduler.h"
#include "model/text_encoder.h"
#include "model/transformer.h"
#include "model/vae.h"
#include "pipeline/image_generator.h"
#include "pipeline/job.h"
#include "pipeline/qwen_image_transformer_load.h"

namespace ditbatch {

class QwenImagePipeline final : public ImageGenerator {
 public:
  // Opens the components; the text encoder, transformer and VAE load on first use, so that a
  // process can encode every prompt, release the encoder, and only then load the denoiser.
  // `reader` decides where tensors come from (default: the file; MPI: one reader per node).
  QwenImagePipeline(Backend& backend, const WeightStore& weights, const Log& log,
                    int64_t max_sequence_length = kDefaultMaxSequenceLength,
                    std::shared_ptr<const WeightReader> reader = nullptr);
  ~QwenImagePipeline() override;
  // Every config of the file, parsed and checked against the tensors it holds (block counts,
  // the transformer's output against the VAE's input), reading no tensor: a wrong file fails
  // here, before anything is allocated for it.
  static void check_configs(const WeightStore& weights);

  using ImageGenerator::encode_prompt;
  // Text to image: `images` must be empty.
  PromptEmbedding encode_prompt(const std::string& prompt, const std::vector<InputImage>& images,
                                StageTimes* times) override;
  void load_text_encoder() override;
  void release_text_encoder() override;
  // Transformer + VAE. Without a list the transformer conditions each step; given every image
  // this process may make (none is a list too), it computes their timesteps' conditioning while
  // it loads and keeps no modulation weights, where that holds less memory
  // (QwenImageTransformer::conditioning_at_load_pays); generate() then refuses other schedules.
  void load_denoiser() override;
  void load_denoiser(const std::vector<ImageJob>& jobs) override;
  // latents: [S, 64], packed, after the last step; rgb [H, W, 3].
  GeneratedImage generate(const ImageJob& job, const PromptEmbedding& prompt, const PromptEmbedding* negative,
                          const StepCallback& on_step, StageTimes& times) override;

  void use_loras(LoraSet loras) override;
  void use_scheduler(const SchedulerConfig& scheduler) override;
  const LoraSet& loras() const override { return loras_; }
  const SchedulerConfig& scheduler_config() const override { return scheduler_; }
  const SchedulerConfig& model_scheduler_config() const override { return model_scheduler_; }
  int64_t max_sequence_length() const override { return max_sequence_length_; }
  Backend& backend() override { return be_; }

 private:
  void load_denoiser_with(const std::optional<std::vector<ImageJob>>& jobs);

  Backend& be_;
  const WeightStore& weights_;
  const Log& log_;
  std::shared_ptr<const WeightReader> reader_;
  int64_t max_sequence_length_;
  PromptTemplate template_;
  SchedulerConfig scheduler_, model_scheduler_;
  LoraSet loras_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<QwenTextEncoder> text_encoder_;
  std::unique_ptr<QwenImageTransformer> transformer_;
  std::unique_ptr<VaeDecoder> vae_;
};

}  // namespace ditbatch
