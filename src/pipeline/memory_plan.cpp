#include "pipeline/memory_plan.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace ditbatch {
namespace {

double gib(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kGiB); }

}  // namespace

int64_t component_bytes(const Component& component, size_t dtype_size, const std::vector<std::string>& prefixes) {
  int64_t n = 0;
  for (const std::string& name : component.tensor_names()) {
    const bool wanted = prefixes.empty() || std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) {
                          return name.rfind(p, 0) == 0;
                        });
    if (wanted) n += shape_numel(component.tensor_info(name).shape);
  }
  return n * static_cast<int64_t>(dtype_size);
}

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
