// The initial noise, bit-identical to torch.randn(shape, generator=torch.Generator().manual_seed(s))
// in float32 on the CPU (x86-64 builds: the AVX2 Box-Muller kernel). Spec qwen-image.md §6.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ditbatch {

// numel values of torch.randn from a generator freshly seeded with `seed` (low 32 bits used).
std::vector<float> torch_randn(uint64_t seed, int64_t numel);

// The latents diffusers' prepare_latents draws for one image: randn of shape (1, 1, C, Hl, Wl)
// returned as [C, Hl, Wl] (host, f32).
Tensor initial_noise(uint64_t seed, int64_t channels, int64_t latent_h, int64_t latent_w);
// (Packed to [S, 4C] by pack_latents, model/latent_packing.h.)

}  // namespace ditbatch
