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

// [C, Hl, Wl] -> [(Hl/2)*(Wl/2), C*4]: packed[i*(Wl/2)+j, c*4+dy*2+dx] = lat[c, 2i+dy, 2j+dx].
Tensor pack_latents(const Tensor& latents);
// The exact inverse: [S, C*4] with the grid (h, w) = (Hl/2, Wl/2) -> [C, 2h, 2w].
Tensor unpack_latents(const Tensor& packed, int64_t h, int64_t w);

}  // namespace ditbatch
