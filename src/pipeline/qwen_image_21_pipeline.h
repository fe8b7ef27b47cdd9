// QwenImage21Pipeline (Qwen-Image-2.1, text to image) behind the model seam: the weight file's
// components, loaded on first use, driven by the sampler's two halves
// (pipeline/qwen_image_21_sampler.h). The prompt is encoded whole (2.1 takes no
// max_sequence_length); each image's schedule is make_schedule over its steps, or the
// checkpoint's own sample_sigmas (Turbo).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/log.h"
#include "io/weight_store.h"
#include "model/qwen_image_21/transformer.h"
#include "model/qwen_image_21/vae.h"
#include "model/scheduler.h"
#include "model/text_encoder.h"
#include "model/tokenizer.h"
#include "pipeline/image_generator.h"
#include "pipeline/qwen_image_21_sampler.h"

namespace ditbatch {

class QwenImage21Pipeline final : public ImageGenerator {
 public:
  // `reader` decides where tensors come from (default: the file; MPI: one reader per node).
  QwenImage21Pipeline(Backend& backend, const WeightStore& weights, const Log& log,
                      std::shared_ptr<const WeightReader> reader = nullptr);
  ~QwenImage21Pipeline() override;
  // Every config of the file parsed and checked against its tensors and against each other (the
  // transformer's text width against the encoder's, its channels against the VAE's), the prompt
  // template and the sigma grid, reading no tensor.
  static void check_configs(const WeightStore& weights);
  // model_index.json's sample_sigmas as convert kept them (Turbo's grid); empty where it has none.
  static std::vector<double> sample_sigmas(const WeightStore& weights);

  using ImageGenerator::encode_prompt;
  // Text to image: `images` must be empty.
  PromptEmbedding encode_prompt(const std::string& prompt, const std::vector<InputImage>& images,
                                StageTimes* times) override;
  void load_text_encoder() override;
  void release_text_encoder() override;
  void load_denoiser() override;
  // The transformer keeps no per-schedule state: the job list changes nothing.
  void load_denoiser(const std::vector<ImageJob>&) override { load_denoiser(); }
  // latents: [S, 64] (a plain flatten of the h x w grid) after the last step; pixels [H, W, 4].
  GeneratedImage generate(const ImageJob& job, const PromptEmbedding& prompt, const PromptEmbedding* negative,
                          const StepCallback& on_step, StageTimes& times) override;

  void use_loras(LoraSet loras) override;
  void use_scheduler(const SchedulerConfig& scheduler) override;
  const LoraSet& loras() const override { return loras_; }
  const SchedulerConfig& scheduler_config() const override { return scheduler_; }
  const SchedulerConfig& model_scheduler_config() const override { return model_scheduler_; }
  int64_t max_sequence_length() const override { return 0; }  // the whole prompt
  Backend& backend() override { return be_; }

 private:
  Backend& be_;
  const WeightStore& weights_;
  const Log& log_;
  std::shared_ptr<const WeightReader> reader_;
  PromptTemplate21 template_;
  std::vector<double> sample_sigmas_;
  SchedulerConfig scheduler_, model_scheduler_;
  LoraSet loras_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<QwenTextEncoder> text_encoder_;
  std::unique_ptr<QwenImage21Transformer> transformer_;
  std::unique_ptr<QwenImage21VaeDecoder> vae_;
};

}  // namespace ditbatch
