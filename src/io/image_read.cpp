#include "io/image_read.h"

#include "core/error.h"
#include "io/exif_orientation.h"
#include "io/image_decoders.h"

namespace ditbatch {

std::string input_image_format(std::string_view bytes) {
  if (bytes.starts_with("\x89PNG\r\n\x1a\n")) return "PNG";
  if (bytes.starts_with("\xFF\xD8\xFF")) return "JPEG";
  if (bytes.size() >= 12 && bytes.starts_with("RIFF") && bytes.substr(8, 4) == "WEBP") return "WebP";
  return "";
}

void check_input_image_size(int64_t width, int64_t height, const std::string& format, const std::string& name,
                            int64_t max_pixels) {
  if (width <= 0 || height <= 0) fail_input("{}: a {} of {}x{} pixels holds no image", name, format, width, height);
  // (a header may state 2^32 - 1 a side: the product in 64 bits unsigned, never signed)
  const uint64_t pixels = static_cast<uint64_t>(width) * static_cast<uint64_t>(height);
  if (width > max_pixels / height)
    fail_input("{}: a {} of {}x{} = {} pixels is past the limit of {} pixels (Pillow refuses it too: a "
               "decompression bomb, or a header that lies)",
               name, format, width, height, pixels, max_pixels);
}

RgbImage decode_input_image(std::string_view bytes, const std::string& name, int64_t max_pixels) {
  const std::string format = input_image_format(bytes);
  DecodedImage decoded;
  if (format == "PNG") {
    decoded = decode_png_image(bytes, name, max_pixels);
  } else if (format == "JPEG") {
    decoded = decode_jpeg_image(bytes, name, max_pixels);
  } else if (format == "WebP") {
    decoded = decode_webp_image(bytes, name, max_pixels);
  } else {
    fail_input("{}: not a PNG, JPEG or WebP image (its first bytes are none of theirs)", name);
  }
  return apply_orientation(std::move(decoded.image), image_orientation(decoded.exif, decoded.xmp));
}

}  // namespace ditbatch
