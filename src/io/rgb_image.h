// An 8-bit RGB image in memory: what an input image becomes once decoded the way diffusers'
// load_image makes it (EXIF orientation applied, then Pillow's convert("RGB")), and what the
// resamplers and processors of the image side of a model take and give.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ditbatch {

struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // [height, width, 3], rows top to bottom, R G B per pixel

  uint8_t at(int64_t y, int64_t x, int c) const { return rgb[static_cast<size_t>((y * width + x) * 3 + c)]; }
};

}  // namespace ditbatch
