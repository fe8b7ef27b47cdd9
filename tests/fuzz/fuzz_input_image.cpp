// The input image decoders an Edit prompt line's "image" reaches (PNG through libpng, JPEG
// through libjpeg-turbo, WebP through libwebp, the EXIF and XMP orientation readers).
//
// Beyond "no crash": an accepted image holds width x height x 3 bytes within the pixel limit
// (here 4 M pixels, so that one input never allocates gigabytes), and decoding the same bytes
// twice gives the same pixels (no uninitialised memory reaches them).
#include "fuzz_util.h"
#include "io/image_read.h"

using namespace ditbatch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int64_t kFuzzMaxPixels = int64_t{4} << 20;
  const std::string bytes(fuzz::as_text(data, size));
  fuzz::parse([&] {
    const RgbImage image = decode_input_image(bytes, "input.img", kFuzzMaxPixels);
    if (image.width <= 0 || image.height <= 0 || image.width * image.height > kFuzzMaxPixels)
      fuzz::finding("an image of " + std::to_string(image.width) + "x" + std::to_string(image.height) + " accepted");
    if (image.rgb.size() != static_cast<size_t>(image.width * image.height * 3))
      fuzz::finding("the pixels are not width x height x 3 bytes");
    if (decode_input_image(bytes, "input.img", kFuzzMaxPixels).rgb != image.rgb)
      fuzz::finding("the same bytes decode to other pixels");
  });
  return 0;
}
