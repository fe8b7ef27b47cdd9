#include "pipeline/qwen_image_model.h"

#include <algorithm>

#include "model/text_encoder.h"
#include "model/transformer.h"
#include "model/vae.h"
#include "pipeline/qwen_image_pipeline.h"

namespace ditbatch {
QwenImageModel::QwenImageModel(const WeightStore& weights) : weights_(weights) {
  QwenImagePipeline::check_configs(weights);
}

// The model card's: 1024x1024, 50 steps, true CFG 4.0 with the negative prompt " ".
GenerationDefaults QwenImageModel::generation_defaults() const {
  GenerationDefaults d;
  d.model = family();
  return d;
}

int64_t QwenImageModel::default_max_sequence_length() const { return kDefaultMaxSequenceLength; }

int64_t QwenImageModel::max_sequence_length_limit() const { return kQwenImageTokenizerMaxLength; }

LoraSet QwenImageModel::open_loras(const std::vector<LoraRequest>& requests) const {
  return LoraSet::open(requests, QwenImageTransformer::lora_targets(TransformerConfig::from(weights_.component("transformer").config())));
}

DeviceMemoryPlan QwenImageModel::device_memory(size_t weight_dtype_size, const std::vector<ImageJob>& jobs,
                                               int64_t text_tokens, const SchedulerConfig& scheduler) const {
  int64_t width = 0, height = 0;
  for (const ImageJob& job : jobs)
    if (job.width * job.height > width * height) width = job.width, height = job.height;
  const int64_t timesteps = std::ssize(conditioning_timesteps(scheduler, jobs));
  return qwen_image_device_memory(weights_, weight_dtype_size, width, height, text_tokens, timesteps);
}

HostRunPlan QwenImageModel::host_run(const std::vector<ImageJob>& jobs, int64_t text_tokens) const {
  return qwen_image_host_run(weights_, jobs, text_tokens);
}

std::unique_ptr<ImageGenerator> QwenImageModel::make_generator(Backend& backend, const Log& log,
                                                               int64_t max_sequence_length,
                                                               std::shared_ptr<const WeightReader> reader) const {
  return std::make_unique<QwenImagePipeline>(backend, weights_, log, max_sequence_length, std::move(reader));
}

DeviceMemoryPlan qwen_image_device_memory(const WeightStore& weights, size_t weight_dtype_size, int64_t width,
                                          int64_t height, int64_t text_tokens, int64_t timesteps) {
  DeviceMemoryPlan plan;
  const Component te = weights.component("text_encoder"), dit = weights.component("transformer"),
                  vae = weights.component("vae");
  plan.text_encoder = component_bytes(te, weight_dtype_size);
  plan.transformer = component_bytes(dit, weight_dtype_size);
  // Only the decoder side of the VAE is read; its 3-D causal kernels as stored (the device
  // keeps their last temporal slice: an upper bound, by ~0.2 GB at most).
  plan.vae = component_bytes(vae, weight_dtype_size, {"decoder.", "post_quant_conv."});

  // The transformer's forward per joint token: the f32 streams x and c, the f32 outputs of the
  // attention and MLP projections, two modulated LayerNorm outputs, Q/K before and after the
  // joint copy, V, O (28 x D bytes in all), and the MLP's GELU output (2 x F); counted for
  // true CFG's batch of two samples (the default). The VAE decode below is the larger of the
  // two at every size anyway (~960 x W x H bytes against ~860 x W x H).
  const TransformerConfig tc = TransformerConfig::from(dit.config());
  if (QwenImageTransformer::conditioning_at_load_pays(tc, timesteps, weight_dtype_size)) {
    // Loaded block by block, each block's modulation weights released once its vectors exist.
    plan.transformer += QwenImageTransformer::conditioning_bytes(tc, timesteps) -
                        QwenImageTransformer::conditioning_weight_bytes(tc, weight_dtype_size);
    plan.conditioning_timesteps = timesteps;
  }
  const int64_t tokens = 2 * ((height / 16) * (width / 16) + text_tokens);
  const int64_t forward = tokens * (28 * tc.inner_dim() + 2 * tc.ff_dim());
  // The VAE at full resolution: about five [H, W, base_dim] bf16 tensors alive, plus the
  // im2col band (256 MiB) when a convolution takes that path.
  const VaeConfig vc = VaeConfig::from(vae.config());
  const int64_t decode = 5 * width * height * vc.base_dim * 2 + 256 * kMiB;
  // + attention scores (the GEMM path's chunks stay under ~1 GiB) and library workspaces; the
  // allocator's size classes round up by at most 1/8.
  plan.denoise_activations = (std::max(forward, decode) + kGiB) * 9 / 8;

  // One prompt (template + text) through the text encoder: the residual stream and attention
  // in f32/bf16 (~24 x hidden bytes per token) and the MLP's gate, up and product (6 x I).
  const TextEncoderConfig ec = TextEncoderConfig::from(te.config());
  const int64_t prompt = text_tokens + 64;
  plan.encode_activations = prompt * (24 * ec.hidden_size + 6 * ec.intermediate_size) + 256 * kMiB;
  return plan;
}

HostRunPlan qwen_image_host_run(const WeightStore& weights, const std::vector<ImageJob>& jobs, int64_t text_tokens) {
  HostRunPlan plan;
  const Component te = weights.component("text_encoder"), dit = weights.component("transformer"),
                  vae = weights.component("vae");
  plan.text_encoder = component_bytes(te, 4);
  plan.denoiser = component_bytes(dit, 4) + component_bytes(vae, 4, {"decoder.", "post_quant_conv."});
  const TransformerConfig tc = TransformerConfig::from(dit.config());
  const VaeConfig vc = VaeConfig::from(vae.config());
  int64_t largest = -1;
  for (const ImageJob& job : jobs) {
    const int64_t S = job.grid_h() * job.grid_w(), batch = job.true_cfg ? 2 : 1;
    const double flops = static_cast<double>(job.steps) * static_cast<double>(batch) *
                             QwenImageTransformer::forward_flops(tc, S, text_tokens) +
                         VaeDecoder::decode_flops(vc, job.height, job.width);
    if (flops > plan.image_flops) {
      plan.image_flops = flops;
      plan.costliest = &job;
    }
    // All f32 on the CPU: the transformer's streams and projections per token (twice the mixed
    // bf16 / f32 bytes of the device estimate's count), and the decode's ~8 live [H, W, base_dim]
    // tensors at full resolution (measured: 496 bytes per pixel with base_dim 16).
    const int64_t forward = batch * (S + text_tokens) * (28 * tc.inner_dim() + 2 * tc.ff_dim()) * 2;
    const int64_t decode = 8 * job.width * job.height * vc.base_dim * 4;
    if (std::max(forward, decode) > largest) {
      largest = std::max(forward, decode);
      plan.largest = &job;
    }
  }
  plan.activations = std::max<int64_t>(largest, 0) + 256 * kMiB;  // + buffers, the runtime
  return plan;
}

}  // namespace ditbatch
