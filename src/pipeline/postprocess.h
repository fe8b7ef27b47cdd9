// diffusers' VaeImageProcessor.postprocess to uint8, from the Backend's generic ops:
// (x / 2 + 0.5).clamp(0, 1), then numpy's (x * 255).round().astype("uint8"), all in f32.
#pragma once

#include "core/backend.h"

namespace ditbatch {

// A decoded image in [-1, 1] (f32 or the act dtype, any shape) -> u8 of the same shape.
// NaN gives 0 (the image is refused before this for any non-finite value).
Tensor postprocess_to_rgb8(Backend& be, const Tensor& decoded);

}  // namespace ditbatch
