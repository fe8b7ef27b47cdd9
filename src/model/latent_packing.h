// The sampler's 2x2 patchify of one image's latents, both ways: diffusers' QwenImagePipeline
// _pack_latents and _unpack_latents (spec qwen-image.md §2.2), composed from Backend::permute.
#pragma once

#include <cstdint>

#include "core/backend.h"

namespace ditbatch {

// x [C, 2h, 2w] -> [h * w, 4C], packed[i * w + j, c * 4 + dy * 2 + dx] = x[c, 2i + dy, 2j + dx].
Tensor pack_latents(Backend& be, const Tensor& x);
// The inverse, laid out for the VAE decoder: packed [h * w, 4C] -> NHWC [2h, 2w, C], the same
// elements in packed's dtype.
Tensor unpack_latents_nhwc(Backend& be, const Tensor& packed, int64_t h, int64_t w);

}  // namespace ditbatch
