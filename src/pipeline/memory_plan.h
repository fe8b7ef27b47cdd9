// What a run will hold on a GPU, worked out by its model family (ImageModel::device_memory) from
// the weight file's tensor sizes and the largest image of the run, and checked against the device's free memory before any weight is read:
// a 48 GB card that cannot hold the text encoder and the transformer together fails in a
// second with the numbers and the way out (--offload-text-encoder), not after minutes of
// loading (notes/users.md: "people OOM on 48 GB cards").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/backend.h"
#include "io/weight_store.h"

namespace ditbatch {

inline constexpr int64_t kGiB = int64_t{1} << 30, kMiB = int64_t{1} << 20;

struct DeviceMemoryPlan {
  int64_t text_encoder = 0, transformer = 0, vae = 0;  // weight bytes in the backend's weight dtype
  int64_t denoise_activations = 0;  // transformer forward + VAE decode of the largest image (estimate)
  int64_t encode_activations = 0;   // one prompt through the text encoder (estimate)
  // > 0: the transformer holds the conditioning of this many model times instead of the weights
  // that compute it (a family that computes it at load, where that holds less).
  int64_t conditioning_timesteps = 0;
  // The most held at once: everything together, or with --offload-text-encoder the larger of
  // the encoding phase and the denoising phase.
  int64_t peak(bool offload_text_encoder) const;
  // "text encoder 15.2 + transformer 40.8 + VAE 0.3 + activations 1.9 = 58.2 GiB"
  std::string describe(bool offload_text_encoder) const;
  std::string conditioning_note() const;  // "" or what the transformer figure holds instead
};

// Bytes of a component's tensors whose names start with one of `prefixes` (all if none), at
// dtype_size bytes a parameter: what a family's plan counts its weights with.
int64_t component_bytes(const Component& component, size_t dtype_size, const std::vector<std::string>& prefixes = {});

// Throws an InputError with the plan, the device's memory and what to do, when the plan's peak
// does not fit in free memory (less a margin for the CUDA context's later growth and
// fragmentation). ranks_on_device: processes that will each load the models onto this GPU
// (--ranks-per-gpu), all checking at the same moment against the same free memory.
void check_device_memory(const DeviceMemoryPlan& plan, bool offload_text_encoder, const Backend::MemoryInfo& memory,
                         const std::string& device, int ranks_on_device = 1);

}  // namespace ditbatch
