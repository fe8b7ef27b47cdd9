// Pillow's resize of an 8-bit RGB image, bit for bit (Pillow 13.0, libImaging/Resample.c): what
// diffusers' VaeImageProcessor (Lanczos) and transformers' Qwen2VLImageProcessorPil (bicubic) do to
// the input images of the Edit pipelines, so that the condition tokens and latents match theirs.
//
// Both are Image.resize(size, filter) with the default box (the whole image) and no reducing_gap:
// a separable filter in two passes, each skipped when its axis keeps its size and each rounded to
// uint8 (22-bit fixed-point taps), usually horizontal then vertical but vertical first when the
// height shrinks much more than the width; the same size is a copy.
#pragma once

#include <cstddef>  // size_t, which io/rgb_image.h uses without including it
#include <cstdint>

#include "io/rgb_image.h"

namespace ditbatch {

// Image.resize((width, height), Image.BICUBIC): cubic convolution with a = -0.5, support 2.
RgbImage resize_bicubic(const RgbImage& image, int64_t width, int64_t height);

// Image.resize((width, height), Image.LANCZOS): Lanczos-3 (a sinc windowed by a sinc), support 3.
RgbImage resize_lanczos(const RgbImage& image, int64_t width, int64_t height);

}  // namespace ditbatch
