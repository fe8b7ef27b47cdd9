#include "pipeline/qwen_image_21_sampler.h"

#include <utility>

#include "core/error.h"
#include "core/timer.h"
#include "model/noise.h"
#include "model/prompt_tokens.h"
#include "pipeline/postprocess.h"

namespace ditbatch {

PromptEmbedding encode_prompt_21(Backend& be, Tokenizer& tokenizer, const PromptTemplate21& prompt_template,
                                 QwenTextEncoder& text_encoder, const std::string& prompt, StageTimes* times) {
  Stopwatch watch;
  // Qwen has no bos token: an empty prompt would leave the encoder nothing to read (P21:249).
  const std::vector<int64_t> ids = tokenizer.encode(apply_prompt_template(prompt_template.text, prompt.empty() ? " " : prompt));
  const int64_t L = std::ssize(ids);
  const int64_t drop = prompt_template.drop_idx;
  if (L <= drop) fail_input("the templated prompt has {} tokens, not more than the {} the pipeline drops", L, drop);
  const Tensor hidden = text_encoder.encode(ids, nullptr, QwenTextEncoder::Output::BeforeFinalNorm);
  PromptEmbedding out;
  out.tokens = out.available = out.uncut = L - drop;
  out.embeds = be.cast(hidden.slice0(drop, L), DType::F32);
  be.synchronize();
  if (times) times->text_encoder += watch.seconds();
  return out;
}

Tensor cfg_combine_without_rescale(Backend& be, const Tensor& cond, const Tensor& neg, float scale) {
  Tensor comb = be.cast(cond, DType::F32);
  be.axpy_(comb, -1.0f, neg);               // cond - neg (the product by -1 is exact)
  be.scale_shift_(comb, scale, 0.0f);       // scale * (cond - neg)
  be.add_(comb, neg);                       // neg + ...
  return comb;
}

GeneratedImage generate_21(Backend& be, QwenImage21Transformer& transformer, QwenImage21VaeDecoder& vae,
                           const ImageJob& job, const Schedule& schedule, const PromptEmbedding& prompt,
                           const PromptEmbedding* negative, const ImageGenerator::StepCallback& on_step,
                           StageTimes& times) {
  DITBATCH_CHECK(!job.true_cfg || negative, "generate: true CFG needs a negative prompt embedding");
  GeneratedImage result;
  const int64_t h = job.height / 16, w = job.width / 16, S = h * w;
  const int64_t channels = transformer.config().in_channels;
  Stopwatch denoise_watch;
  // randn((1, 1, C, h, w)) on the host, packed by a plain flatten: [C, S] -> [S, C].
  Tensor latents = be.permute(
      be.upload(initial_noise(job.seed, channels, h, w), DType::F32).view({channels, S}), {1, 0});
  Transformer21Cache cond_cache, negative_cache;
  for (int i = 0; i < schedule.steps(); ++i) {
    const bool first = i == 0;  // fills the caches; later steps read them
    const float tt = schedule.model_time(i);
    Tensor velocity = transformer.forward(latents, first ? &prompt.embeds : nullptr, tt, h, w, cond_cache);
    if (job.true_cfg) {
      const Tensor negative_velocity =
          transformer.forward(latents, first ? &negative->embeds : nullptr, tt, h, w, negative_cache);
      velocity = cfg_combine_without_rescale(be, velocity, negative_velocity, job.cfg);
    }
    be.axpy_(latents, schedule.dt(i), velocity);  // the scheduler's Euler step: x += dt * v
    if (on_step) on_step(i + 1, schedule.steps());
  }
  cond_cache = {};  // the text K/V of every block: freed before the decode needs the memory
  negative_cache = {};
  const bool finite = keep_final_latents(be, latents, schedule.steps(), result);
  times.transformer += denoise_watch.seconds();
  if (!finite) return result;
  Stopwatch vae_watch;
  keep_decoded_image(be, vae.decode_latents(latents, h, w), result);  // decoded: [H, W, 4] in [-1, 1]
  times.vae += vae_watch.seconds();
  return result;
}

}  // namespace ditbatch
