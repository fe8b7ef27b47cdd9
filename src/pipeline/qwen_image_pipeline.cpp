#include "pipeline/qwen_image_pipeline.h"

#include <cmath>
#include <utility>

#include "core/error.h"
#include "core/timer.h"
#include "model/latent_packing.h"
#include "model/noise.h"
#include "pipeline/postprocess.h"
#include "pipeline/qwen_image_transformer_load.h"
#include "pipeline/true_cfg.h"

namespace ditbatch {

QwenImagePipeline::QwenImagePipeline(Backend& backend, const WeightStore& weights, const Log& log,
                                     int64_t max_sequence_length, std::shared_ptr<const WeightReader> reader)
    : be_(backend),
      weights_(weights),
      log_(log),
      reader_(reader ? std::move(reader) : std::make_shared<WeightReader>()),
      max_sequence_length_(max_sequence_length) {
  if (max_sequence_length < 1 || max_sequence_length > kQwenImageTokenizerMaxLength)
    fail_input("max_sequence_length {} must be 1..{}, as diffusers allows", max_sequence_length,
               kQwenImageTokenizerMaxLength);
  template_ = PromptTemplate::from_weights(weights);
  scheduler_ = model_scheduler_ = SchedulerConfig::from(weights.component("scheduler").config());
  check_configs(weights);  // a wrong file fails before any weight is read
  tokenizer_ = std::make_unique<Tokenizer>(
      Tokenizer::from_files(reader_->files(weights.component("tokenizer")), weights.path() + ":/tokenizer"));
}

QwenImagePipeline::~QwenImagePipeline() = default;

void QwenImagePipeline::check_configs(const WeightStore& weights) {
  const Component dit = weights.component("transformer"), vae = weights.component("vae"),
                  text = weights.component("text_encoder");
  const TransformerConfig transformer = TransformerConfig::from(dit.config());
  const VaeConfig vae_config = VaeConfig::from(vae.config());
  const TextEncoderConfig text_config = TextEncoderConfig::from(text.config());
  check_block_counts(transformer.block_counts(), dit.tensor_names(), dit.where());
  check_block_counts(vae_config.block_counts(), vae.tensor_names(), vae.where());
  check_block_counts(text_config.block_counts(QwenTextEncoder::tensor_prefix(text)), text.tensor_names(), text.where());
  if (transformer.out_channels != vae_config.z_dim)
    fail_input("{}: transformer out_channels {} != vae z_dim {}", weights.path(), transformer.out_channels,
               vae_config.z_dim);
  SchedulerConfig::from(weights.component("scheduler").config());
}

void QwenImagePipeline::load_text_encoder() {
  if (!text_encoder_) text_encoder_ = QwenTextEncoder::load(be_, weights_.component("text_encoder"), *reader_, log_);
}

PromptEmbedding QwenImagePipeline::encode_prompt(const std::string& prompt, const std::vector<InputImage>& images,
                                                 StageTimes* times) {
  DITBATCH_CHECK(images.empty(), "encode_prompt: {} takes no input image", "QwenImagePipeline");
  Stopwatch watch;
  load_text_encoder();
  PromptTokens tokens = tokenize_prompt(*tokenizer_, prompt, template_, max_sequence_length_);
  Tensor hidden = text_encoder_->encode(tokens.ids);  // [n, hidden] after the final norm
  // Keep rows [drop_idx, drop_idx + count): a copy, so the full sequence can be freed.
  PromptEmbedding out;
  out.tokens = tokens.keep_count;
  out.available = static_cast<int64_t>(tokens.ids.size()) - tokens.keep_first;
  out.uncut = tokens.uncut_count - tokens.keep_first;
  out.embeds = be_.cast(hidden.slice0(tokens.keep_first, tokens.keep_first + tokens.keep_count), DType::F32);
  be_.synchronize();
  if (times) times->text_encoder += watch.seconds();
  return out;
}

void QwenImagePipeline::release_text_encoder() {
  if (text_encoder_) log_.info("text encoder released");
  text_encoder_.reset();
}

void QwenImagePipeline::use_loras(LoraSet loras) {
  DITBATCH_CHECK(!transformer_, "use_loras after the transformer loaded");
  loras_ = std::move(loras);
}

void QwenImagePipeline::use_scheduler(const SchedulerConfig& scheduler) {
  DITBATCH_CHECK(!transformer_, "use_scheduler after the transformer loaded (its conditioning follows the schedule)");
  scheduler_ = scheduler;
}

void QwenImagePipeline::load_denoiser() { load_denoiser_with(std::nullopt); }

void QwenImagePipeline::load_denoiser(const std::vector<ImageJob>& jobs) { load_denoiser_with(jobs); }

void QwenImagePipeline::load_denoiser_with(const std::optional<std::vector<ImageJob>>& jobs) {
  if (transformer_ && vae_) return;
  Stopwatch load;
  transformer_ = load_qwen_image_transformer(be_, weights_, *reader_, loras_, scheduler_, jobs, log_);
  const Component vae = weights_.component("vae");
  vae_ = std::make_unique<VaeDecoder>(be_, VaeConfig::from(vae.config()), *reader_->binder(vae));
  log_.info("transformer ({} blocks, {} heads x {}) and VAE loaded in {:.1f} s", transformer_->config().num_layers,
            transformer_->config().num_attention_heads, transformer_->config().attention_head_dim, load.seconds());
}

GeneratedImage QwenImagePipeline::generate(const ImageJob& job, const PromptEmbedding& prompt,
                                           const PromptEmbedding* negative, const StepCallback& on_step,
                                           StageTimes& times) {
  load_denoiser();
  DITBATCH_CHECK(!job.true_cfg || negative, "generate: true CFG needs a negative prompt embedding");
  GeneratedImage result;
  const int64_t h = job.grid_h(), w = job.grid_w(), S = h * w;
  const int64_t channels = transformer_->config().out_channels;

  Stopwatch denoise_watch;
  // torch.randn((1, 1, C, Hl, Wl), generator=manual_seed(seed)) on the host, packed to [S, 4C] on the backend.
  Tensor latents = pack_latents(be_, be_.upload(initial_noise(job.seed, channels, job.latent_h(), job.latent_w()), DType::F32));
  const Schedule schedule = make_schedule(scheduler_, static_cast<int>(job.steps), S);
  for (int i = 0; i < schedule.steps(); ++i) {
    // Timestep-only work once per step, shared by the cond and negative passes.
    TimestepConditioning cond = transformer_->condition(schedule.model_time(i));
    Tensor velocity;
    if (job.true_cfg) {  // the cond and negative passes as one batch
      auto [cond_velocity, negative_velocity] = transformer_->forward_cfg(
          latents, prompt.embeds, prompt.tokens, negative->embeds, negative->tokens, h, w, cond);
      velocity = true_cfg_combine(be_, cond_velocity, negative_velocity, job.cfg);
    } else {
      velocity = transformer_->forward(latents, prompt.embeds, prompt.tokens, h, w, cond);
    }
    be_.axpy_(latents, schedule.dt(i), velocity);  // the scheduler's Euler step: x += dt * v
    if (on_step) on_step(i + 1, schedule.steps());
  }
  const bool finite = keep_final_latents(be_, latents, job.steps, result);
  times.transformer += denoise_watch.seconds();
  if (!finite) return result;
  Stopwatch vae_watch;
  keep_decoded_image(be_, vae_->decode_latents(latents, h, w), result);  // decoded: [H, W, 3] in [-1, 1]
  times.vae += vae_watch.seconds();
  return result;
}

}  // namespace ditbatch
