// PNG files: written with libpng (8-bit RGB or RGBA, UTF-8 iTXt text chunks, no timestamp, so the bytes
// depend only on pixels and text), atomically (temp name, fsync, rename); and read back to
// check that a file is complete (resume) or to look at its pixels and text (tests, tools).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ditbatch {

using PngText = std::vector<std::pair<std::string, std::string>>;  // in chunk order

// Encodes an 8-bit image of `channels` 3 (RGB) or 4 (RGBA, not premultiplied), rows of
// width * channels bytes, with text chunks into PNG bytes.
std::string encode_png(const uint8_t* pixels, int64_t width, int64_t height, int channels, const PngText& text);
// Writes the PNG atomically; returns its bytes (for the manifest's sha256).
std::string write_png_atomic(const std::string& path, const uint8_t* pixels, int64_t width, int64_t height,
                             int channels, const PngText& text);

// True if the file is a whole, readable PNG (signature, every chunk's CRC, IEND).
bool png_is_complete(const std::string& path);

struct PngImage {
  int64_t width = 0, height = 0;
  int channels = 3;             // 3: RGB, 4: RGBA
  std::vector<uint8_t> pixels;  // [height, width, channels]
  PngText text;
};
// Reads an 8-bit RGB or RGBA PNG as ditbatch writes it; throws InputError if it is not one.
PngImage read_png(const std::string& path);

}  // namespace ditbatch
