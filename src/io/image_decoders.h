// The three decoders behind decode_input_image (io/image_read.h): each turns one format into
// Pillow's convert("RGB") of the image Pillow opens, and hands back the metadata blocks an
// orientation can come from. Each refuses an image past the pixel limit before it allocates
// the pixels.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "io/rgb_image.h"

namespace ditbatch {

struct DecodedImage {
  RgbImage image;
  std::string exif;  // a TIFF-structured EXIF block, with or without its "Exif\0\0" header
  std::string xmp;   // an XMP packet, as text
};

DecodedImage decode_png_image(std::string_view bytes, const std::string& name, int64_t max_pixels);
DecodedImage decode_jpeg_image(std::string_view bytes, const std::string& name, int64_t max_pixels);
DecodedImage decode_webp_image(std::string_view bytes, const std::string& name, int64_t max_pixels);

// Throws InputError naming the image when width x height is none or past max_pixels.
void check_input_image_size(int64_t width, int64_t height, const std::string& format, const std::string& name,
                            int64_t max_pixels);

}  // namespace ditbatch
