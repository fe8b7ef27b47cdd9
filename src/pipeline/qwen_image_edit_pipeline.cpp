#include "pipeline/qwen_image_edit_pipeline.h"

#include <utility>

#include "core/error.h"
#include "core/timer.h"
#include "model/edit_prompt_embeds.h"
#include "model/latent_packing.h"
#include "model/noise.h"
#include "pipeline/input_images.h"
#include "pipeline/postprocess.h"
#include "pipeline/qwen_image_transformer_load.h"
#include "pipeline/true_cfg.h"

namespace ditbatch {

namespace {

// The images by content, in order: what the caches of condition images and vision rows key on.
std::string images_key(const std::vector<InputImage>& images) {
  std::string key;
  for (const InputImage& image : images) key += image.file + '\0' + image.sha256 + '\0';
  return key;
}

}  // namespace

EditPipeline edit_pipeline_of(const std::string& pipeline_class) {
  if (pipeline_class == "QwenImageEditPipeline") return EditPipeline::Edit;
  if (pipeline_class == "QwenImageEditPlusPipeline") return EditPipeline::EditPlus;
  fail_input("pipeline class '{}' is not an Edit pipeline (QwenImageEditPipeline, QwenImageEditPlusPipeline)",
             pipeline_class);
}

std::vector<EditConditionImage> edit_condition_images(EditPipeline pipeline, const std::vector<InputImage>& images,
                                                      const std::string& origin) {
  if (images.empty() || (pipeline == EditPipeline::Edit && images.size() != 1))
    fail_input("{}: {} input images, but the {} pipeline takes {}", origin, images.size(),
               pipeline == EditPipeline::Edit ? "Edit" : "Edit-Plus",
               pipeline == EditPipeline::Edit ? "exactly one" : "one or more");
  std::vector<EditConditionImage> out;
  for (const InputImage& image : images) {
    const RgbImage decoded = read_input_image(image, origin);
    try {
      out.push_back(pipeline == EditPipeline::Edit ? edit_condition_image(decoded) : edit_plus_condition_image(decoded));
    } catch (const InputError& e) {
      fail_input("{}: \"image\" {}: {}", origin, image.file, e.what());
    }
  }
  return out;
}

QwenImageEditPipeline::QwenImageEditPipeline(Backend& backend, const WeightStore& weights, const Log& log,
                                             std::shared_ptr<const WeightReader> reader, TextPositionMode positions)
    : be_(backend),
      weights_(weights),
      log_(log),
      reader_(reader ? std::move(reader) : std::make_shared<WeightReader>()),
      pipeline_(edit_pipeline_of(weights.root_string("pipeline_class"))),
      positions_(positions) {
  check_configs(weights);  // a wrong file fails before any weight is read
  const Component processor = weights.component("processor");
  processor_ = Qwen2VLImageProcessorConfig::parse(processor.group().attr_string("config_json"),
                                                  weights.path() + ":/processor");
  scheduler_ = model_scheduler_ = SchedulerConfig::from(weights.component("scheduler").config());
  tokenizer_ = std::make_unique<Tokenizer>(
      Tokenizer::from_files(reader_->files(weights.component("tokenizer")), weights.path() + ":/tokenizer"));
}

QwenImageEditPipeline::~QwenImageEditPipeline() = default;

void QwenImageEditPipeline::check_configs(const WeightStore& weights) {
  edit_pipeline_of(weights.root_string("pipeline_class"));
  const Component dit = weights.component("transformer"), vae = weights.component("vae"),
                  text = weights.component("text_encoder");
  const TransformerConfig transformer = TransformerConfig::from(dit.config());
  const VaeConfig vae_config = VaeConfig::from(vae.config());
  const TextEncoderConfig text_config = TextEncoderConfig::from(text.config());
  const VisionConfig vision = VisionConfig::from(text.config());
  check_block_counts(transformer.block_counts(), dit.tensor_names(), dit.where());
  check_block_counts(vae_config.block_counts(), vae.tensor_names(), vae.where());
  check_block_counts(text_config.block_counts(QwenTextEncoder::tensor_prefix(text)), text.tensor_names(), text.where());
  check_block_counts(vision.block_counts(QwenVisionTower::kTensorPrefix), text.tensor_names(), text.where());
  if (transformer.out_channels != vae_config.z_dim)
    fail_input("{}: transformer out_channels {} != vae z_dim {}", weights.path(), transformer.out_channels,
               vae_config.z_dim);
  if (transformer.in_channels != 4 * vae_config.z_dim)
    fail_input("{}: transformer in_channels {} != 4 x vae z_dim {} (the condition latents are packed 2x2 as the noise)",
               weights.path(), transformer.in_channels, vae_config.z_dim);
  if (vision.out_hidden_size != text_config.hidden_size)
    fail_input("{}: text_encoder vision_config.out_hidden_size {} != the language model's hidden_size {}",
               weights.path(), vision.out_hidden_size, text_config.hidden_size);
  if (!vae.has_tensor("encoder.conv_in.weight") || !vae.has_tensor("quant_conv.weight"))
    fail_input("{}: the vae holds no encoder (encoder.*, quant_conv.*), which an Edit pipeline encodes its input "
               "images with: convert the diffusers folder again with this ditbatch",
               weights.path());
  if (!weights.has_component("processor"))
    fail_input("{}: no processor component (the image processor's preprocessor_config.json): convert the diffusers "
               "folder again with this ditbatch",
               weights.path());
  Qwen2VLImageProcessorConfig::parse(weights.component("processor").group().attr_string("config_json"),
                                     weights.path() + ":/processor");
  SchedulerConfig::from(weights.component("scheduler").config());
}

void QwenImageEditPipeline::load_text_encoder() {
  const Component text = weights_.component("text_encoder");
  if (!text_encoder_) text_encoder_ = QwenTextEncoder::load(be_, text, *reader_, log_);
  if (!vision_) vision_ = QwenVisionTower::load(be_, text, *reader_, log_);
}

void QwenImageEditPipeline::release_text_encoder() {
  if (text_encoder_ || vision_) log_.info("text encoder and vision tower released");
  text_encoder_.reset();
  vision_.reset();
  vision_rows_ = Tensor();
  vision_key_.clear();
}

const std::vector<EditConditionImage>& QwenImageEditPipeline::condition_images(const std::vector<InputImage>& images,
                                                                                const std::string& origin) {
  const std::string key = images_key(images);
  if (key != condition_key_ || condition_images_.empty()) {
    condition_key_.clear();  // a failure below leaves no stale images under the new key
    condition_images_ = edit_condition_images(pipeline_, images, origin);
    condition_key_ = key;
  }
  return condition_images_;
}

const Tensor& QwenImageEditPipeline::vision_rows(const std::vector<InputImage>& images,
                                                 std::vector<std::array<int64_t, 3>>& grid_thw) {
  const std::string key = images_key(images);
  if (key != vision_key_ || !vision_rows_.defined()) {
    vision_key_.clear();
    std::vector<RgbImage> vl_images;
    for (const EditConditionImage& image : condition_images(images, images.empty() ? "" : images.front().path))
      vl_images.push_back(image.vl_image);
    const Qwen2VLImageInputs inputs = qwen2vl_process_images(vl_images, processor_);  // [Np, 1176] on the host
    std::vector<ImageGrid> grids;
    for (const auto& [t, h, w] : inputs.grid_thw) grids.push_back({t, h, w});
    vision_rows_ = vision_->forward(Tensor::host_f32({inputs.num_patches, inputs.patch_dim}, inputs.pixel_values), grids);
    vision_grids_ = inputs.grid_thw;
    vision_key_ = key;
  }
  grid_thw = vision_grids_;
  return vision_rows_;
}

PromptEmbedding QwenImageEditPipeline::encode_prompt(const std::string& prompt, const std::vector<InputImage>& images,
                                                     StageTimes* times) {
  Stopwatch watch;
  load_text_encoder();
  std::vector<std::array<int64_t, 3>> grid_thw;
  const Tensor& rows = vision_rows(images, grid_thw);  // [pads, hidden]
  const EditPromptTokens tokens =
      tokenize_edit_prompt(*tokenizer_, pipeline_, prompt, grid_thw, vision_->config().spatial_merge_size);
  PromptEmbedding out;
  out.tokens = out.available = out.uncut = tokens.keep_count;
  // A copy, so the encoder's whole sequence can be freed.
  out.embeds = be_.cast(edit_prompt_embeds(*text_encoder_, tokens, rows, positions_), DType::F32);  // [L, hidden]
  be_.synchronize();
  if (times) times->text_encoder += watch.seconds();
  return out;
}

void QwenImageEditPipeline::use_loras(LoraSet loras) {
  DITBATCH_CHECK(!transformer_, "use_loras after the transformer loaded");
  loras_ = std::move(loras);
}

void QwenImageEditPipeline::use_scheduler(const SchedulerConfig& scheduler) {
  DITBATCH_CHECK(!transformer_, "use_scheduler after the transformer loaded (its conditioning follows the schedule)");
  scheduler_ = scheduler;
}

void QwenImageEditPipeline::use_text_positions(TextPositionMode mode) { positions_ = mode; }

void QwenImageEditPipeline::load_denoiser() { load_denoiser_with(std::nullopt); }

void QwenImageEditPipeline::load_denoiser(const std::vector<ImageJob>& jobs) { load_denoiser_with(jobs); }

void QwenImageEditPipeline::load_denoiser_with(const std::optional<std::vector<ImageJob>>& jobs) {
  if (transformer_ && vae_ && vae_encoder_) return;
  Stopwatch load;
  transformer_ = load_qwen_image_transformer(be_, weights_, *reader_, loras_, scheduler_, jobs, log_);
  const Component vae = weights_.component("vae");
  const VaeConfig config = VaeConfig::from(vae.config());
  vae_ = std::make_unique<VaeDecoder>(be_, config, *reader_->binder(vae));
  vae_encoder_ = std::make_unique<VaeEncoder>(be_, config, *reader_->binder(vae));
  log_.info("transformer ({} blocks, {} heads x {}) and VAE (decoder and encoder) loaded in {:.1f} s",
            transformer_->config().num_layers, transformer_->config().num_attention_heads,
            transformer_->config().attention_head_dim, load.seconds());
}

QwenImageEditPipeline::ConditionLatents QwenImageEditPipeline::encode_condition_latents(const ImageJob& job) {
  load_denoiser();
  ConditionLatents out;
  std::vector<Tensor> parts;  // [Si, 64] each
  int64_t rows = 0;
  for (const EditConditionImage& image : condition_images(job.images, job.origin)) {
    const VaeImageInput input = vae_preprocess(image.vae_image);  // [3, h, w], multiples of 32
    parts.push_back(vae_encoder_->encode_packed(Tensor::host_f32({3, input.height, input.width}, input.pixels)));
    out.grids.push_back({input.height / 16, input.width / 16});
    rows += parts.back().dim(0);
  }
  out.latents = be_.empty({rows, parts.front().dim(1)}, DType::F32);
  int64_t at = 0;
  for (const Tensor& part : parts) {
    be_.copy_(out.latents.slice0(at, at + part.dim(0)), part);
    at += part.dim(0);
  }
  return out;
}

GeneratedImage QwenImageEditPipeline::generate(const ImageJob& job, const PromptEmbedding& prompt,
                                               const PromptEmbedding* negative, const StepCallback& on_step,
                                               StageTimes& times) {
  load_denoiser();
  DITBATCH_CHECK(!job.true_cfg || negative, "generate: true CFG needs a negative prompt embedding");
  GeneratedImage result;
  const int64_t h = job.grid_h(), w = job.grid_w(), S0 = h * w;
  const int64_t channels = transformer_->config().out_channels;

  Stopwatch vae_encode_watch;
  const ConditionLatents condition = encode_condition_latents(job);
  times.vae += vae_encode_watch.seconds();

  Stopwatch denoise_watch;
  // The image stream [noise | condition images]: the noise latents are its first S0 rows, stepped
  // in place; the condition rows stay as encoded.
  std::vector<PackedGrid> img_shapes = {PackedGrid{h, w}};
  img_shapes.insert(img_shapes.end(), condition.grids.begin(), condition.grids.end());
  const int64_t S = S0 + condition.latents.dim(0);
  Tensor stream = be_.empty({S, condition.latents.dim(1)}, DType::F32);  // [S, 64]
  Tensor latents = stream.slice0(0, S0);
  // torch.randn((1, 1, C, Hl, Wl), generator=manual_seed(seed)) on the host, packed to [S0, 4C].
  be_.copy_(latents, pack_latents(be_, be_.upload(initial_noise(job.seed, channels, job.latent_h(), job.latent_w()), DType::F32)));
  be_.copy_(stream.slice0(S0, S), condition.latents);
  // The schedule's shift follows the noise latents' tokens alone (image_seq_len = latents.shape[1]).
  const Schedule schedule = make_schedule(scheduler_, static_cast<int>(job.steps), S0);
  for (int i = 0; i < schedule.steps(); ++i) {
    TimestepConditioning cond = transformer_->condition(schedule.model_time(i));
    Tensor velocity;  // [S0, 64]
    if (job.true_cfg) {
      auto [cond_velocity, negative_velocity] = transformer_->forward_cfg(
          stream, prompt.embeds, prompt.tokens, negative->embeds, negative->tokens, img_shapes, cond);
      velocity = true_cfg_combine(be_, cond_velocity, negative_velocity, job.cfg);
    } else {
      velocity = transformer_->forward(stream, prompt.embeds, prompt.tokens, img_shapes, cond);
    }
    be_.axpy_(latents, schedule.dt(i), velocity);  // x += dt * v on the noise rows
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
