#include "pipeline/memory_plan.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "model/text_encoder.h"
#include "model/transformer.h"
#include "model/vae.h"

namespace ditbatch {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

// Bytes of the component's tensors whose names start with one of `prefixes` (all if none).
int64_t weight_bytes(const Component& component, size_t dtype_size, const std::vector<std::string>& prefixes = {}) {
  int64_t n = 0;
  for (const std::string& name : component.tensor_names()) {
    const bool wanted = prefixes.empty() || std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) {
                          return name.rfind(p, 0) == 0;
                        });
    if (wanted) n += shape_numel(component.tensor_info(name).shape);
  }
  return n * static_cast<int64_t>(dtype_size);
}

double gib(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kGiB); }

}  // namespace

int64_t DeviceMemoryPlan::peak(bool offload_text_encoder) const {
  const int64_t denoise = transformer + vae + denoise_activations;
  if (offload_text_encoder) return std::max(text_encoder + encode_activations, denoise);
  return text_encoder + denoise;
}

std::string DeviceMemoryPlan::describe(bool offload_text_encoder) const {
  if (offload_text_encoder)
    return fmt::format("the larger of text encoder {:.1f} + activations {:.1f} and transformer {:.1f} + VAE {:.1f} + "
                       "activations {:.1f} = {:.1f} GiB",
                       gib(text_encoder), gib(encode_activations), gib(transformer), gib(vae),
                       gib(denoise_activations), gib(peak(true))) +
           conditioning_note();
  return fmt::format("text encoder {:.1f} + transformer {:.1f} + VAE {:.1f} + activations {:.1f} = {:.1f} GiB",
                     gib(text_encoder), gib(transformer), gib(vae), gib(denoise_activations), gib(peak(false))) +
         conditioning_note();
}

std::string DeviceMemoryPlan::conditioning_note() const {
  return conditioning_timesteps > 0
             ? fmt::format(" (the transformer without its modulation weights: {} timesteps' conditioning computed at load)",
                           conditioning_timesteps)
             : "";
}

DeviceMemoryPlan plan_device_memory(const WeightStore& weights, size_t weight_dtype_size, int64_t width,
                                    int64_t height, int64_t text_tokens, int64_t timesteps) {
  DeviceMemoryPlan plan;
  const Component te = weights.component("text_encoder"), dit = weights.component("transformer"),
                  vae = weights.component("vae");
  plan.text_encoder = weight_bytes(te, weight_dtype_size);
  plan.transformer = weight_bytes(dit, weight_dtype_size);
  // Only the decoder side of the VAE is read; its 3-D causal kernels as stored (the device
  // keeps their last temporal slice: an upper bound, by ~0.2 GB at most).
  plan.vae = weight_bytes(vae, weight_dtype_size, {"decoder.", "post_quant_conv."});

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

void check_device_memory(const DeviceMemoryPlan& plan, bool offload_text_encoder, const Backend::MemoryInfo& memory,
                         const std::string& device, int ranks_on_device) {
  // What the CUDA context, cuBLAS / cuDNN handles and their kernels may still take, and room
  // for fragmentation, per process.
  const int64_t ranks = std::max(1, ranks_on_device);
  const int64_t margin = kGiB * ranks;
  const auto free_bytes = static_cast<int64_t>(memory.free_bytes);
  auto need = [&](bool offload) { return plan.peak(offload) * ranks + margin; };
  if (need(offload_text_encoder) <= free_bytes) return;
  const std::string have =
      fmt::format("{} has {:.1f} GiB free of {:.1f} GiB", device, gib(free_bytes), gib(static_cast<int64_t>(memory.total_bytes)));
  // "(text encoder ... = 58.2 GiB, + 1 GiB margin)", per rank when ranks share the GPU
  auto why = [&](bool offload) {
    return fmt::format("{}{}, + {:.0f} GiB margin", ranks > 1 ? fmt::format("{} ranks x (", ranks) : "",
                       plan.describe(offload) + (ranks > 1 ? ")" : ""), gib(margin));
  };
  if (!offload_text_encoder && need(true) <= free_bytes)
    fail_input("{}; this run needs about {:.1f} GiB ({}). Run with --offload-text-encoder: every prompt is encoded "
               "first and the text encoder freed before the transformer loads, which needs about {:.1f} GiB here ({})",
               have, gib(need(false)), why(false), gib(need(true)), why(true));
  const std::string even_offloaded =
      offload_text_encoder ? " with --offload-text-encoder"
                           : fmt::format(", and about {:.1f} GiB even with --offload-text-encoder", gib(need(true)));
  const std::string advice = ranks > 1 ? fmt::format("Use fewer ranks per GPU (--ranks-per-gpu is letting {} share it) "
                                                     "or a GPU with more free memory",
                                                     ranks)
                                       : "Use a GPU with more free memory";
  fail_input("{}; this run needs about {:.1f} GiB ({}){}. {}{}", have, gib(need(offload_text_encoder)),
             why(offload_text_encoder), even_offloaded, advice,
             memory.total_bytes > memory.free_bytes + static_cast<size_t>(2 * kGiB)
                 ? " (other processes hold part of this one: see nvidia-smi)"
                 : "");
}

}  // namespace ditbatch
