// QwenImage21Pipeline.__call__ for text to image, on any backend, from loaded components: spec
// qwen-image-2.1.md §3. The prompt in the 2.1 template (an empty one as " "), tokenized whole
// (no length cut), the text encoder's last layer before its final norm from the drop index on;
// the seed's noise [C, h, w] packed by a plain flatten; each step the transformer (the first
// filling the text's K/V cache, one per prompt), true CFG without the norm rescale, the Euler
// step; z * std + mean, the VAE decode, RGBA uint8. One image at a time: every image is
// independent of batch composition and placement. The two halves take the components they use,
// so the text encoder can be freed before the denoiser loads (the family's ImageGenerator,
// pipeline/qwen_image_21_pipeline.h, holds them).
#pragma once

#include <string>

#include "core/backend.h"
#include "model/qwen_image_21/transformer.h"
#include "model/qwen_image_21/vae.h"
#include "model/scheduler.h"
#include "model/text_encoder.h"
#include "model/tokenizer.h"
#include "pipeline/image_generator.h"
#include "pipeline/job.h"

namespace ditbatch {

// The prompt in its template: text ("{}" marks the prompt) and drop_idx, its leading tokens the
// pipeline drops (those of its system turn).
struct PromptTemplate21 {
  std::string text;
  int64_t drop_idx = 0;
};

// The text encoder's rows of the prompt, before its final norm, from the drop index on: [L, hidden].
PromptEmbedding encode_prompt_21(Backend& be, Tokenizer& tokenizer, const PromptTemplate21& prompt_template,
                                 QwenTextEncoder& text_encoder, const std::string& prompt, StageTimes* times = nullptr);

// schedule: the job's (make_schedule over its steps, or the checkpoint's sample_sigmas) for its
// (H/16)(W/16) image tokens. latents: [S, C] after the last step; pixels: [H, W, 4].
GeneratedImage generate_21(Backend& be, QwenImage21Transformer& transformer, QwenImage21VaeDecoder& vae,
                           const ImageJob& job, const Schedule& schedule, const PromptEmbedding& prompt,
                           const PromptEmbedding* negative, const ImageGenerator::StepCallback& on_step,
                           StageTimes& times);

// Per row: neg + scale * (cond - neg), three rounded f32 ops as the 2.1 pipeline writes them (no
// rescale to the conditioned prediction's norm, unlike Qwen-Image). cond, neg: f32 [S, C].
Tensor cfg_combine_without_rescale(Backend& be, const Tensor& cond, const Tensor& neg, float scale);

}  // namespace ditbatch
