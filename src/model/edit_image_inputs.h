// What the Edit pipelines make of an input image before any model sees it: the image the
// Qwen2-VL processor gets (the prompt side) and the image the VAE encodes, and diffusers'
// VaeImageProcessor.preprocess of the latter (pipeline_qwenimage_edit{,_plus}.py, step 3).
#pragma once

#include <cstddef>  // size_t, which io/rgb_image.h uses without including it
#include <cstdint>
#include <vector>

#include "io/rgb_image.h"
#include "model/edit_image_sizes.h"

namespace ditbatch {

// The pixel areas of calculate_dimensions: the VAE side (and the Edit pipeline's output), and
// Edit-Plus's prompt side (CONDITION_IMAGE_SIZE).
inline constexpr int64_t kEditVaeImageArea = 1024 * 1024;
inline constexpr int64_t kEditPlusConditionImageArea = 384 * 384;

struct EditConditionImage {
  RgbImage vl_image;   // for the Qwen2-VL image processor (the text encoder's image tokens)
  RgbImage vae_image;  // for vae_preprocess, at a size of multiples of 32
};

// QwenImageEditPipeline (one image, image 0 of a list): both sides are the Lanczos resize to
// calculate_dimensions(1024², w / h); its VAE-side preprocess resizes to the same size, a copy.
EditConditionImage edit_condition_image(const RgbImage& image);

// QwenImageEditPlusPipeline, per image, both from the original: the prompt side at
// calculate_dimensions(384², w / h), the VAE side at calculate_dimensions(1024², w / h), Lanczos.
EditConditionImage edit_plus_condition_image(const RgbImage& image);

// VaeImageProcessor.preprocess of an image already at its target size (the resize a copy):
// numpy's f32(v) / 255, then torch's 2x - 1.
struct VaeImageInput {
  std::vector<float> pixels;  // [3, height, width], in [-1, 1]
  int64_t height = 0, width = 0;
};
VaeImageInput vae_preprocess(const RgbImage& image);

}  // namespace ditbatch
