// The model seam, half one: a loaded pipeline of one model family, as the batch machinery (the
// runner, the outputs, selftest, bench) drives it. Load and release its parts, encode a prompt,
// make an image; nothing here names a model. What a weight file says before anything loads is
// the other half (pipeline/image_model.h), which makes these.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "model/lora.h"
#include "model/scheduler.h"
#include "model/text_positions.h"
#include "pipeline/job.h"

namespace ditbatch {

struct PromptEmbedding {
  Tensor embeds;          // [L, the text encoder's width] on the backend: the kept encoder rows
  int64_t tokens = 0;     // L
  int64_t available = 0;  // the prompt's encoder rows before the max_sequence_length cut (>= L)
  int64_t uncut = 0;      // its rows had the tokenizer not cut it either (>= available)
};

struct StageTimes {
  double text_encoder = 0, transformer = 0, vae = 0;
};

struct GeneratedImage {
  bool ok = false;
  std::string error;         // why not, e.g. "NaN in the latents after step 50"
  Tensor latents;            // host f32, the model's final latents as diffusers' output_type="latent" gives them
  std::vector<uint8_t> pixels;  // [H, W, channels] uint8 (output_type="pil")
  int channels = 3;             // 3: RGB; 4: RGBA (Qwen-Image-2.1), the alpha as the model makes it
};

class ImageGenerator {
 public:
  virtual ~ImageGenerator() = default;

  // The embedding of a prompt as the family's text encoder makes it. `images`: the job's input
  // images, which an edit model's encoder reads with the text (none for text to image: a family
  // that takes no image refuses them). Both the prompt and the negative prompt of an edit carry them.
  virtual PromptEmbedding encode_prompt(const std::string& prompt, const std::vector<InputImage>& images,
                                        StageTimes* times) = 0;
  PromptEmbedding encode_prompt(const std::string& prompt, StageTimes* times = nullptr) {
    return encode_prompt(prompt, std::vector<InputImage>{}, times);
  }
  // Loading is collective under MPI (one reader per node broadcasts): every rank calls these
  // in the same order, whether or not it has images to make.
  virtual void load_text_encoder() = 0;     // idempotent
  virtual void release_text_encoder() = 0;  // frees its weights (--offload-text-encoder)
  // The denoiser (and decoder); idempotent. Given every image this process may make (none is a
  // list too), a family may prepare for exactly their schedules while it loads; generate() may
  // then refuse others.
  virtual void load_denoiser() = 0;
  virtual void load_denoiser(const std::vector<ImageJob>& jobs) = 0;

  // Called after each step with (steps done, steps total); may throw to abandon the image.
  using StepCallback = std::function<void(int, int)>;
  // negative: the negative prompt's embedding where the job has true CFG, else null.
  virtual GeneratedImage generate(const ImageJob& job, const PromptEmbedding& prompt, const PromptEmbedding* negative,
                                  const StepCallback& on_step, StageTimes& times) = 0;

  // Before load_denoiser(): LoRAs merged into the denoiser's weights as they load (a set checked
  // against this model by ImageModel::open_loras), and a scheduler in place of the weight file's.
  virtual void use_loras(LoraSet loras) = 0;
  virtual void use_scheduler(const SchedulerConfig& scheduler) = 0;
  // Before encoding: how the text encoder numbers the image tokens of a prompt that holds some
  // (model/text_positions.h). A family whose prompts hold none takes only Sequential.
  virtual void use_text_positions(TextPositionMode mode) {
    DITBATCH_CHECK(mode == TextPositionMode::Sequential, "this family's prompts hold no image tokens");
  }
  virtual TextPositionMode text_positions() const { return TextPositionMode::Sequential; }
  virtual const LoraSet& loras() const = 0;
  virtual const SchedulerConfig& scheduler_config() const = 0;
  virtual const SchedulerConfig& model_scheduler_config() const = 0;  // the weight file's
  virtual int64_t max_sequence_length() const = 0;
  virtual Backend& backend() = 0;
};

}  // namespace ditbatch
