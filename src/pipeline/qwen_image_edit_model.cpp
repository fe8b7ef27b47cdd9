#include "pipeline/qwen_image_edit_model.h"

#include <algorithm>

#include "core/error.h"
#include "model/edit_image_inputs.h"
#include "model/edit_image_sizes.h"
#include "model/qwen_vl_vision.h"
#include "model/text_encoder.h"
#include "model/transformer.h"
#include "model/vae.h"
#include "pipeline/qwen_image_edit_pipeline.h"
#include "pipeline/qwen_image_transformer_load.h"

namespace ditbatch {

namespace {

// The kept prompt rows besides the prompt's own tokens and the image pads, bounded by their bytes
// (a token is at least a byte, whatever the tokenizer): the assistant turn after the prompt
// ("<|im_end|>\n<|im_start|>assistant\n") and Edit's two vision brackets; per Edit-Plus image,
// "Picture k: " and its brackets.
constexpr int64_t kTemplateTokens = 16, kPictureTokens = 16;

// calculate_dimensions at the image's aspect, refused where it rounds a side to nothing.
ImageSize condition_size(const InputImage& image, int64_t area, const std::string& origin) {
  const ImageSize size = calculate_dimensions(area, static_cast<double>(image.width) / static_cast<double>(image.height));
  if (size.width < 1 || size.height < 1)
    fail_input("{}: \"image\" {} is {}x{}: at the Edit pipeline's area of {} pixels its aspect rounds to {}x{}; "
               "crop it to a less extreme aspect",
               origin, image.path, image.width, image.height, area, size.width, size.height);
  return size;
}

}  // namespace

QwenImageEditModel::QwenImageEditModel(const WeightStore& weights)
    : weights_(weights), pipeline_(edit_pipeline_of(weights.root_string("pipeline_class"))) {
  QwenImageEditPipeline::check_configs(weights);
  processor_ = Qwen2VLImageProcessorConfig::parse(weights.component("processor").group().attr_string("config_json"),
                                                  weights.path() + ":/processor");
}

std::string QwenImageEditModel::pipeline_class() const {
  return pipeline_ == EditPipeline::Edit ? "QwenImageEditPipeline" : "QwenImageEditPlusPipeline";
}

std::string QwenImageEditModel::family() const {
  if (pipeline_ == EditPipeline::Edit) return "Qwen-Image-Edit";
  // 2511 is the Edit-Plus checkpoint that modulates the condition tokens at t = 0.
  return TransformerConfig::from(weights_.component("transformer").config()).zero_cond_t ? "Qwen-Image-Edit-2511"
                                                                                          : "Qwen-Image-Edit-2509";
}

// The model cards': true CFG 4.0 with the negative prompt " ", 50 steps (Edit) or 40 (2509,
// 2511); the output size from the input image (Edit) or the last one (Edit-Plus) unless given.
GenerationDefaults QwenImageEditModel::generation_defaults() const {
  GenerationDefaults d;
  d.model = family();
  d.steps = pipeline_ == EditPipeline::Edit ? 50 : 40;
  d.width = d.height = 0;
  d.size_from_input_images = true;
  return d;
}

void QwenImageEditModel::settle_input_images(ImageJob& job) const {
  DITBATCH_CHECK(!job.images.empty(), "{}: an edit without an input image", job.origin);
  for (const InputImage& image : job.images) {
    DITBATCH_CHECK(image.width > 0 && image.height > 0, "{}: {} was not inspected", job.origin, image.path);
    const ImageSize vae = condition_size(image, kEditVaeImageArea, job.origin);
    // Edit's prompt side is its VAE side; Edit-Plus's is the smaller CONDITION_IMAGE_SIZE.
    const ImageSize vl =
        pipeline_ == EditPipeline::Edit ? vae : condition_size(image, kEditPlusConditionImageArea, job.origin);
    try {
      const int64_t factor = processor_.patch_size * processor_.merge_size;
      smart_resize(vl.height, vl.width, factor, processor_.min_pixels, processor_.max_pixels);
    } catch (const InputError& e) {
      fail_input("{}: \"image\" {}: {}", job.origin, image.path, e.what());
    }
  }
  if (job.width > 0 && job.height > 0) return;
  // diffusers: calculate_dimensions(1024², w / h) of the last image, each side floored to a
  // multiple of 16 (vae_scale_factor * 2); Edit takes its one image.
  const InputImage& last = job.images.back();
  const ImageSize size = condition_size(last, kEditVaeImageArea, job.origin);
  if (job.width == 0) job.width = size.width / 16 * 16;
  if (job.height == 0) job.height = size.height / 16 * 16;
  if (job.width > kMaxImageSide || job.height > kMaxImageSide)
    fail_input("{}: the output size {}x{} that \"image\" {} ({}x{}) gives is past {} pixels a side; give width and "
               "height",
               job.origin, job.width, job.height, last.path, last.width, last.height, kMaxImageSide);
}

QwenImageEditModel::JobShape QwenImageEditModel::shape_of(const ImageJob& job) const {
  JobShape shape;
  shape.noise_tokens = job.grid_h() * job.grid_w();
  std::vector<InputImage> images = job.images;
  if (images.empty()) images.push_back({"", "", "", job.width, job.height});
  int64_t prompt_bytes = std::max<int64_t>(std::ssize(job.prompt), 1);
  if (job.true_cfg) prompt_bytes = std::max<int64_t>(prompt_bytes, std::ssize(job.negative_prompt));
  shape.text_tokens = prompt_bytes + kTemplateTokens;  // a token is at least a byte
  const int64_t factor = processor_.patch_size * processor_.merge_size;
  for (const InputImage& image : images) {
    const double ratio = static_cast<double>(image.width) / static_cast<double>(std::max<int64_t>(image.height, 1));
    const ImageSize vae = calculate_dimensions(kEditVaeImageArea, ratio);
    const ImageSize vl =
        pipeline_ == EditPipeline::Edit ? vae : calculate_dimensions(kEditPlusConditionImageArea, ratio);
    shape.condition_tokens += (vae.height / 16) * (vae.width / 16);
    shape.largest_condition_pixels = std::max(shape.largest_condition_pixels, vae.width * vae.height);
    const ImageSize patches = vl.width > 0 && vl.height > 0
                                  ? smart_resize(vl.height, vl.width, factor, processor_.min_pixels, processor_.max_pixels)
                                  : ImageSize{factor, factor};
    const int64_t image_patches = (patches.height / processor_.patch_size) * (patches.width / processor_.patch_size);
    shape.vision_patches += image_patches;
    shape.text_tokens += image_patches / (processor_.merge_size * processor_.merge_size) + kPictureTokens;
  }
  return shape;
}

LoraSet QwenImageEditModel::open_loras(const std::vector<LoraRequest>& requests) const {
  return LoraSet::open(requests, QwenImageTransformer::lora_targets(TransformerConfig::from(weights_.component("transformer").config())));
}

DeviceMemoryPlan QwenImageEditModel::device_memory(size_t weight_dtype_size, const std::vector<ImageJob>& jobs,
                                                   int64_t, const SchedulerConfig& scheduler) const {
  DeviceMemoryPlan plan;
  const Component te = weights_.component("text_encoder"), dit = weights_.component("transformer"),
                  vae = weights_.component("vae");
  plan.text_encoder = component_bytes(te, weight_dtype_size);  // the language model and the vision tower
  plan.transformer = component_bytes(dit, weight_dtype_size);
  plan.vae = component_bytes(vae, weight_dtype_size);  // decoder and encoder (3-D kernels as stored: an upper bound)
  const TransformerConfig tc = TransformerConfig::from(dit.config());
  const int64_t timesteps = std::ssize(conditioning_timesteps(scheduler, jobs));
  if (QwenImageTransformer::conditioning_at_load_pays(tc, timesteps, weight_dtype_size)) {
    plan.transformer += QwenImageTransformer::conditioning_bytes(tc, timesteps) -
                        QwenImageTransformer::conditioning_weight_bytes(tc, weight_dtype_size);
    plan.conditioning_timesteps = timesteps;
  }
  const VaeConfig vc = VaeConfig::from(vae.config());
  const TextEncoderConfig ec = TextEncoderConfig::from(te.config());
  const VisionConfig vision = VisionConfig::from(te.config());
  int64_t denoise = 0, encode = 0;
  for (const ImageJob& job : jobs) {
    const JobShape s = shape_of(job);
    // The transformer's forward per joint token as in text to image (28 x D + 2 x F bytes), for
    // true CFG's two samples, over the noise, condition and text tokens; the VAE at full
    // resolution, decoding the output or encoding the largest input (~5 [H, W, base_dim] bf16
    // tensors, + the im2col band).
    const int64_t batch = job.true_cfg ? 2 : 1;
    const int64_t forward =
        batch * (s.noise_tokens + s.condition_tokens + s.text_tokens) * (28 * tc.inner_dim() + 2 * tc.ff_dim());
    const int64_t vae_pass =
        5 * std::max(job.width * job.height, s.largest_condition_pixels) * vc.base_dim * 2 + 256 * kMiB;
    denoise = std::max({denoise, forward, vae_pass});
    // One prompt through the language model (+ the system turn the pipeline drops), and the
    // vision tower over every patch (~24 x hidden + 6 x intermediate bytes a row, as the LM).
    const int64_t prompt = (s.text_tokens + 64) * (24 * ec.hidden_size + 6 * ec.intermediate_size);
    const int64_t tower = s.vision_patches * (24 * vision.hidden_size + 6 * vision.intermediate_size);
    encode = std::max(encode, prompt + tower);
  }
  // + attention scores (the GEMM path's chunks stay under ~1 GiB) and library workspaces; the
  // allocator's size classes round up by at most 1/8.
  plan.denoise_activations = (denoise + kGiB) * 9 / 8;
  plan.encode_activations = encode + kGiB + 256 * kMiB;
  return plan;
}

HostRunPlan QwenImageEditModel::host_run(const std::vector<ImageJob>& jobs, int64_t) const {
  HostRunPlan plan;
  const Component te = weights_.component("text_encoder"), dit = weights_.component("transformer"),
                  vae = weights_.component("vae");
  plan.text_encoder = component_bytes(te, 4);
  plan.denoiser = component_bytes(dit, 4) + component_bytes(vae, 4);
  const TransformerConfig tc = TransformerConfig::from(dit.config());
  const VaeConfig vc = VaeConfig::from(vae.config());
  int64_t largest = -1;
  for (const ImageJob& job : jobs) {
    const JobShape s = shape_of(job);
    const int64_t batch = job.true_cfg ? 2 : 1;
    // The denoising steps over the whole image stream and the decode; the encoders' work (the
    // vision tower, the VAE encoder of the inputs) runs once per image and is not counted.
    const double flops = static_cast<double>(job.steps) * static_cast<double>(batch) *
                             QwenImageTransformer::forward_flops(tc, s.noise_tokens + s.condition_tokens, s.text_tokens) +
                         VaeDecoder::decode_flops(vc, job.height, job.width);
    if (flops > plan.image_flops) {
      plan.image_flops = flops;
      plan.costliest = &job;
    }
    // All f32: twice the device estimate's mixed bytes per token; the VAE's ~8 live [H, W,
    // base_dim] f32 tensors at the larger of the output and the largest input.
    const int64_t forward = batch * (s.noise_tokens + s.condition_tokens + s.text_tokens) *
                            (28 * tc.inner_dim() + 2 * tc.ff_dim()) * 2;
    const int64_t vae_pass = 8 * std::max(job.width * job.height, s.largest_condition_pixels) * vc.base_dim * 4;
    if (std::max(forward, vae_pass) > largest) {
      largest = std::max(forward, vae_pass);
      plan.largest = &job;
    }
  }
  plan.activations = std::max<int64_t>(largest, 0) + 256 * kMiB;
  return plan;
}

std::unique_ptr<ImageGenerator> QwenImageEditModel::make_generator(Backend& backend, const Log& log, int64_t,
                                                                   std::shared_ptr<const WeightReader> reader) const {
  return std::make_unique<QwenImageEditPipeline>(backend, weights_, log, std::move(reader));
}

}  // namespace ditbatch
