// PNG files: written with libpng (RGB8, UTF-8 iTXt text chunks, no timestamp, so the bytes
// depend only on pixels and text), atomically (temp name, fsync, rename); and read back to
// check that a file is complete (resume) or to look at its pixels and text (tests, tools).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ditbatch {

using PngText = std::vector<std::pair<std::string, std::string>>;  // in chunk order

// Encodes an 8-bit RGB image (rows of width*3 bytes) with text chunks into PNG bytes.
std::string encode_png(const uint8_t* rgb, int64_t width, int64_t height, const PngText& text);
// Writes the PNG atomically; returns its bytes (for the manifest's sha256).
std::string write_png_atomic(const std::string& path, const uint8_t* rgb, int64_t width, int64_t height,
                             const PngText& text);

// True if the file is a whole, readable PNG (signature, every chunk's CRC, IEND).
bool png_is_complete(const std::string& path);

struct PngImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;
  PngText text;
};
// Reads an 8-bit RGB PNG written by ditbatch; throws InputError if it is not one.
PngImage read_png(const std::string& path);

}  // namespace ditbatch
