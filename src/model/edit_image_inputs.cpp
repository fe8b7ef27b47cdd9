#include "model/edit_image_inputs.h"

#include "core/error.h"
#include "model/image_resample.h"

namespace ditbatch {

namespace {

// calculate_dimensions at the image's aspect; a side rounded to 0 (an aspect past what the area
// allows) is refused here, where the reference fails later inside Pillow.
ImageSize condition_size(const RgbImage& image, int64_t area) {
  if (image.width < 1 || image.height < 1)
    fail_input("Edit input image of {}x{} (width x height) is empty", image.width, image.height);
  const ImageSize size =
      calculate_dimensions(area, static_cast<double>(image.width) / static_cast<double>(image.height));
  if (size.width < 1 || size.height < 1)
    fail_input(
        "Edit input image of {}x{} (width x height): its aspect at an area of {} pixels rounds to {}x{}; "
        "use a less extreme aspect",
        image.width, image.height, area, size.width, size.height);
  return size;
}

}  // namespace

EditConditionImage edit_condition_image(const RgbImage& image) {
  const ImageSize size = condition_size(image, kEditVaeImageArea);
  RgbImage resized = resize_lanczos(image, size.width, size.height);
  return EditConditionImage{resized, resized};
}

EditConditionImage edit_plus_condition_image(const RgbImage& image) {
  const ImageSize vl = condition_size(image, kEditPlusConditionImageArea);
  const ImageSize vae = condition_size(image, kEditVaeImageArea);
  return EditConditionImage{resize_lanczos(image, vl.width, vl.height), resize_lanczos(image, vae.width, vae.height)};
}

VaeImageInput vae_preprocess(const RgbImage& image) {
  if (image.rgb.size() != static_cast<size_t>(image.width * image.height * 3) || image.width < 1 || image.height < 1)
    fail_input("VAE preprocess: a {}x{} RGB image holds {} bytes, expected {}", image.width, image.height,
               image.rgb.size(), image.width * image.height * 3);
  VaeImageInput out{std::vector<float>(image.rgb.size()), image.height, image.width};
  const int64_t plane = image.height * image.width;
  for (int64_t i = 0; i < plane; ++i)
    for (int c = 0; c < 3; ++c) {
      const float unit = static_cast<float>(image.rgb[static_cast<size_t>(i * 3 + c)]) / 255.0f;
      out.pixels[static_cast<size_t>(c * plane + i)] = 2.0f * unit - 1.0f;
    }
  return out;
}

}  // namespace ditbatch
