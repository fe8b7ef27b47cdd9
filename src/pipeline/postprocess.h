// diffusers' VaeImageProcessor.postprocess to uint8, from the Backend's generic ops:
// (x / 2 + 0.5).clamp(0, 1), then numpy's (x * 255).round().astype("uint8"), all in f32.
#pragma once

#include "core/backend.h"
#include "pipeline/image_generator.h"

namespace ditbatch {

// A decoded image in [-1, 1] (f32 or the act dtype, any shape) -> u8 of the same shape.
// NaN gives 0 (the image is refused before this for any non-finite value).
Tensor postprocess_to_u8(Backend& be, const Tensor& decoded);

// The end of every family's generate(): the latents after the last step, copied to the host
// into image.latents, and the decoded image, postprocessed into image.pixels
// ([H, W, channels] as `decoded` is laid out). Each returns false,
// with image.error, where a value is NaN or Inf (a bad weight or an overflow: the image fails,
// the run goes on).
bool keep_final_latents(Backend& be, const Tensor& latents, int64_t steps, GeneratedImage& image);
bool keep_decoded_image(Backend& be, const Tensor& decoded, GeneratedImage& image);

}  // namespace ditbatch
