#include "pipeline/qwen_image_21_model.h"

#include <algorithm>

#include "model/qwen_image_21/transformer.h"
#include "model/qwen_image_21/vae.h"
#include "model/text_encoder.h"
#include "pipeline/qwen_image_21_pipeline.h"

namespace ditbatch {
namespace {


// The template's user turn around the prompt: "<|im_start|>user\n" and
// "<|im_end|>\n<|im_start|>assistant\n" (8 tokens with the real tokenizer), with room to spare.
constexpr int64_t kUserTurnTokens = 16;

struct Image21 {
  int64_t S = 0, L = 0, batch = 1;  // image tokens, text tokens, samples per step (2 with CFG)
};

Image21 shape_of(const ImageJob& job, int64_t text_tokens) {
  return {job.grid_h() * job.grid_w(), text_tokens, job.true_cfg ? 2 : 1};
}

// The text rows' K and V of every block, kept from an image's first step to its last, per sample.
int64_t kv_cache_bytes(const Transformer21Config& c, const Image21& image, size_t act_size) {
  return image.batch * c.num_layers * 2 * (image.L + image.S) * c.inner_dim() * static_cast<int64_t>(act_size);
}

// The forward's live rows per token: the f32 stream and projections, the modulated norms, Q, K,
// V, O (28 x D bytes in the mixed bf16 / f32 count) and the gated MLP's proj, gate and product (6 x F).
int64_t forward_bytes(const Transformer21Config& c, const Image21& image) {
  return (image.S + image.L) * (28 * c.inner_dim() + 6 * c.ff_dim());
}

}  // namespace

QwenImage21Model::QwenImage21Model(const WeightStore& weights) : weights_(weights) {
  QwenImage21Pipeline::check_configs(weights);
}

// The model card's: 1024x1024, 40 steps (Turbo: its sigma grid's), no CFG (a --cfg above 1 runs
// it with the negative prompt " ", without the norm rescale); sides floored to multiples of 32.
GenerationDefaults QwenImage21Model::generation_defaults() const {
  GenerationDefaults d;
  d.model = family();
  d.steps = 40;
  d.cfg = 1.0;
  d.size_multiple = 32;
  const std::vector<double> sigmas = QwenImage21Pipeline::sample_sigmas(weights_);
  if (!sigmas.empty()) d.steps = d.fixed_steps = std::ssize(sigmas);
  return d;
}

LoraSet QwenImage21Model::open_loras(const std::vector<LoraRequest>& requests) const {
  return LoraSet::open(requests,
                       QwenImage21Transformer::lora_targets(Transformer21Config::from(weights_.component("transformer").config())));
}

int64_t qwen_image_21_text_token_bound(const std::vector<ImageJob>& jobs) {
  int64_t bytes = 1;  // an empty prompt is encoded as " "
  for (const ImageJob& job : jobs) {
    bytes = std::max<int64_t>(bytes, std::ssize(job.prompt));
    if (job.true_cfg) bytes = std::max<int64_t>(bytes, std::ssize(job.negative_prompt));
  }
  return bytes + kUserTurnTokens;
}

DeviceMemoryPlan QwenImage21Model::device_memory(size_t weight_dtype_size, const std::vector<ImageJob>& jobs,
                                                 int64_t text_tokens, const SchedulerConfig&) const {
  DeviceMemoryPlan plan;
  const Component te = weights_.component("text_encoder"), dit = weights_.component("transformer"),
                  vae = weights_.component("vae");
  plan.text_encoder = component_bytes(te, weight_dtype_size, {QwenTextEncoder::tensor_prefix(te)});
  plan.transformer = component_bytes(dit, weight_dtype_size);
  plan.vae = component_bytes(vae, weight_dtype_size, {"decoder.", "post_quant_conv."});
  const Transformer21Config tc = Transformer21Config::from(dit.config());
  const Vae21Config vc = Vae21Config::from(vae.config());
  const int64_t L = text_tokens > 0 ? text_tokens : qwen_image_21_text_token_bound(jobs);
  int64_t largest = 0;
  for (const ImageJob& job : jobs) {
    const Image21 image = shape_of(job, L);
    // The caches of the image's samples stay while each forward runs (one sample at a time);
    // they are freed before its decode: about five [H, W, decoder_base_dim] bf16 tensors, plus
    // the im2col band (256 MiB) when a convolution takes that path.
    const int64_t denoise = kv_cache_bytes(tc, image, weight_dtype_size) + forward_bytes(tc, image);
    const int64_t decode = 5 * job.width * job.height * vc.decoder_base_dim * 2 + 256 * kMiB;
    largest = std::max({largest, denoise, decode});
  }
  // + attention scores (the GEMM path's chunks stay under ~1 GiB) and library workspaces; the
  // allocator's size classes round up by at most 1/8.
  plan.denoise_activations = (largest + kGiB) * 9 / 8;
  const TextEncoderConfig ec = TextEncoderConfig::from(te.config());
  const int64_t prompt = L + 16;  // + the system turn the pipeline drops after encoding
  plan.encode_activations = prompt * (24 * ec.hidden_size + 6 * ec.intermediate_size) + 256 * kMiB;
  return plan;
}

HostRunPlan QwenImage21Model::host_run(const std::vector<ImageJob>& jobs, int64_t text_tokens) const {
  HostRunPlan plan;
  const Component te = weights_.component("text_encoder"), dit = weights_.component("transformer"),
                  vae = weights_.component("vae");
  plan.text_encoder = component_bytes(te, 4, {QwenTextEncoder::tensor_prefix(te)});
  plan.denoiser = component_bytes(dit, 4) + component_bytes(vae, 4, {"decoder.", "post_quant_conv."});
  const Transformer21Config tc = Transformer21Config::from(dit.config());
  const Vae21Config vc = Vae21Config::from(vae.config());
  const int64_t L = text_tokens > 0 ? text_tokens : qwen_image_21_text_token_bound(jobs);
  int64_t largest = -1;
  for (const ImageJob& job : jobs) {
    const Image21 image = shape_of(job, L);
    // The first step runs the text rows too; the others read them from the cache.
    const double forward = QwenImage21Transformer::forward_flops(tc, image.S, L, false) +
                           static_cast<double>(job.steps - 1) * QwenImage21Transformer::forward_flops(tc, image.S, L, true);
    const double flops = static_cast<double>(image.batch) * forward +
                         QwenImage21VaeDecoder::decode_flops(vc, job.height, job.width);
    if (flops > plan.image_flops) {
      plan.image_flops = flops;
      plan.costliest = &job;
    }
    // All f32 on the CPU: twice the device estimate's mixed bytes, the caches in f32, and the
    // decode's ~8 live [H, W, decoder_base_dim] tensors at full resolution.
    const int64_t denoise = kv_cache_bytes(tc, image, 4) + 2 * forward_bytes(tc, image);
    const int64_t decode = 8 * job.width * job.height * vc.decoder_base_dim * 4;
    if (std::max(denoise, decode) > largest) {
      largest = std::max(denoise, decode);
      plan.largest = &job;
    }
  }
  plan.activations = std::max<int64_t>(largest, 0) + 256 * kMiB;  // + buffers, the runtime
  return plan;
}

std::unique_ptr<ImageGenerator> QwenImage21Model::make_generator(Backend& backend, const Log& log, int64_t,
                                                                 std::shared_ptr<const WeightReader> reader) const {
  return std::make_unique<QwenImage21Pipeline>(backend, weights_, log, std::move(reader));
}

}  // namespace ditbatch
