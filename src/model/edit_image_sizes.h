// The sizes the Edit pipelines give their input images: diffusers' calculate_dimensions (a target
// area at the image's aspect, multiples of 32) and transformers' smart_resize (the Qwen2-VL
// processor's: multiples of the merged patch, inside a pixel budget). Both in float64 with
// Python's round (ties to even), as the reference computes them.
#pragma once

#include <cstdint>

namespace ditbatch {

struct ImageSize {
  int64_t width = 0, height = 0;
  bool operator==(const ImageSize&) const = default;
};

// calculate_dimensions(target_area, ratio) of pipeline_qwenimage_edit{,_plus}.py, ratio = width /
// height: width = sqrt(area * ratio), height = width / ratio, each rounded to a multiple of 32.
// A very wide or tall ratio may round a side to 0, as the reference does (its resize then fails).
ImageSize calculate_dimensions(int64_t target_area, double ratio);

// smart_resize(height, width, factor, min_pixels, max_pixels) of transformers' Qwen2-VL image
// processor: each side rounded to a multiple of factor, then scaled down into max_pixels
// (floor) or up to min_pixels (ceil) at the image's aspect. An aspect past 200 is an InputError.
ImageSize smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels, int64_t max_pixels);

}  // namespace ditbatch
