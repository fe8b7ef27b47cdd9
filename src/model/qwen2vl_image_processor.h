// transformers' Qwen2VLImageProcessorPil (the PIL backend, which the reference runs without
// torchvision): an RGB image -> the vision tower's pixel_values and image_grid_thw. smart_resize
// to multiples of patch_size * merge_size, Pillow's bicubic resize, f32(v * f64(rescale)), then
// (x - mean) / std in f32 with f32 constants, then the patchify into merge-block order.
#pragma once

#include <array>
#include <cstddef>  // size_t, which io/rgb_image.h uses without including it
#include <cstdint>
#include <string>
#include <vector>

#include "io/rgb_image.h"

namespace ditbatch {

// The image processor's preprocessor_config.json, with the class defaults for absent keys.
struct Qwen2VLImageProcessorConfig {
  static constexpr std::array<float, 3> f32_constants(double r, double g, double b) {
    return {static_cast<float>(r), static_cast<float>(g), static_cast<float>(b)};
  }

  int64_t min_pixels = 56 * 56;         // size.shortest_edge
  int64_t max_pixels = 28 * 28 * 1280;  // size.longest_edge; Qwen-Image-Edit's file says 12845056
  int64_t patch_size = 14;
  int64_t temporal_patch_size = 2;  // a still image is its frame repeated this many times
  int64_t merge_size = 2;           // patches merged per side into one language-model token
  double rescale_factor = 1.0 / 255.0;
  // OPENAI_CLIP_MEAN and _STD: Python floats that numpy casts to f32 (decimal -> f64 -> f32).
  std::array<float, 3> image_mean = f32_constants(0.48145466, 0.4578275, 0.40821073);
  std::array<float, 3> image_std = f32_constants(0.26862954, 0.26130258, 0.27577711);

  // The text of a preprocessor_config.json; errors name `where` (the file) and the field. As the
  // class's __init__: "size" {shortest_edge, longest_edge} first, then min_pixels / max_pixels.
  // Only the resize this port has is accepted: resample 3 (bicubic), resize, rescale, normalize on.
  static Qwen2VLImageProcessorConfig parse(const std::string& text, const std::string& where);

  int64_t patch_dim() const { return 3 * temporal_patch_size * patch_size * patch_size; }  // 1176
};

// What the processor returns for a list of images (BatchFeature's two tensors), on the host.
struct Qwen2VLImageInputs {
  std::vector<float> pixel_values;  // [num_patches, patch_dim], images in order
  int64_t num_patches = 0, patch_dim = 0;
  std::vector<std::array<int64_t, 3>> grid_thw;  // per image (1, grid_h, grid_w), in patches
};

// One image's patches: rows (block_h, block_w, merge_h, merge_w), columns (channel, temporal,
// patch_y, patch_x); the temporal copies are the same frame.
Qwen2VLImageInputs qwen2vl_process_image(const RgbImage& image, const Qwen2VLImageProcessorConfig& config);
// Several images: their rows concatenated in order, one grid each.
Qwen2VLImageInputs qwen2vl_process_images(const std::vector<RgbImage>& images,
                                          const Qwen2VLImageProcessorConfig& config);

}  // namespace ditbatch
