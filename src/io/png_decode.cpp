// PNG input images through libpng, samples kept as stored (no libpng colour transform) and then
// mapped to RGB as Pillow maps its mode of the file (PngImagePlugin's _MODES, then convert).
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "io/image_decoders.h"

namespace ditbatch {

namespace {

struct PngSource {
  std::string_view bytes;
  size_t offset = 0;
  std::string error;
};

void on_error(png_structp png, png_const_charp message) {
  static_cast<PngSource*>(png_get_error_ptr(png))->error = message;
  png_longjmp(png, 1);
}
void on_warning(png_structp, png_const_charp) {}

void read_from_memory(png_structp png, png_bytep out, png_size_t length) {
  auto* source = static_cast<PngSource*>(png_get_io_ptr(png));
  if (length > source->bytes.size() - source->offset) png_error(png, "the file ends inside the PNG data (truncated)");
  std::memcpy(out, source->bytes.data() + source->offset, length);
  source->offset += length;
}

// What one file holds, as stored: the samples unpacked to one byte (bit depth <= 8) or two
// big-endian bytes (16) each.
struct PngRaster {
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0;
  std::vector<uint8_t> samples;
  std::vector<png_bytep> rows;  // into samples; held here, not in read_raster (png_longjmp skips its destructors)
  std::vector<png_color> palette;
  std::string exif, xmp, raw_profile_exif;
};

void keep_metadata(png_structp png, png_infop info, PngRaster* raster) {
  png_bytep exif = nullptr;
  png_uint_32 exif_length = 0;
  if (png_get_eXIf_1(png, info, &exif_length, &exif) && exif && raster->exif.empty())
    raster->exif.assign(reinterpret_cast<const char*>(exif), exif_length);
  png_textp text = nullptr;
  int n_text = 0;
  png_get_text(png, info, &text, &n_text);
  for (int i = 0; i < n_text; ++i) {
    const std::string_view key = text[i].key;
    const size_t length = text[i].compression > 0 ? text[i].itxt_length : text[i].text_length;
    if (key == "XML:com.adobe.xmp" && raster->xmp.empty()) raster->xmp.assign(text[i].text, length);
    if (key == "Raw profile type exif" && raster->raw_profile_exif.empty())
      raster->raw_profile_exif.assign(text[i].text, length);
  }
}

// libpng's calls, kept apart from anything with a destructor (png_longjmp skips them).
bool read_raster(png_structp png, png_infop info, png_infop end_info, PngRaster* raster, const std::string& name,
                 int64_t max_pixels) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_benign_errors(png, 1);  // a palette index past the palette: black, as Pillow shows it
  png_set_sig_bytes(png, 0);
  png_read_info(png, info);
  int interlace = 0;
  png_get_IHDR(png, info, &raster->width, &raster->height, &raster->bit_depth, &raster->color_type, &interlace,
               nullptr, nullptr);
  check_input_image_size(raster->width, raster->height, "PNG", name, max_pixels);
  if (raster->bit_depth < 8) png_set_packing(png);  // one sample a byte, values as stored
  if (interlace != PNG_INTERLACE_NONE) png_set_interlace_handling(png);
  png_read_update_info(png, info);
  png_colorp palette = nullptr;
  int n_palette = 0;
  if (png_get_PLTE(png, info, &palette, &n_palette)) raster->palette.assign(palette, palette + n_palette);
  const size_t row_bytes = png_get_rowbytes(png, info);
  raster->samples.resize(row_bytes * raster->height);
  raster->rows.resize(raster->height);
  for (png_uint_32 y = 0; y < raster->height; ++y) raster->rows[y] = raster->samples.data() + y * row_bytes;
  png_read_image(png, raster->rows.data());
  png_read_end(png, end_info);
  keep_metadata(png, info, raster);
  keep_metadata(png, end_info, raster);
  return true;
}

// Pillow's "Raw profile type exif" text: the block in hex after the text's third newline
// ("\nexif\n   length\n" comes first); whitespace between the digits is skipped, as
// bytes.fromhex skips it. Anything else: no block.
std::string exif_of_raw_profile(const std::string& text) {
  size_t start = 0;
  for (int newline = 0; newline < 3; ++newline) {
    start = text.find('\n', start);
    if (start == std::string::npos) return {};
    ++start;
  }
  std::string block;
  int high = -1;
  for (size_t i = start; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n' || c == ' ' || c == '\t' || c == '\r') continue;
    int v = -1;
    if (c >= '0' && c <= '9') v = c - '0';
    if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    if (v < 0) return {};
    if (high < 0) {
      high = v;
    } else {
      block.push_back(static_cast<char>(high * 16 + v));
      high = -1;
    }
  }
  return high < 0 ? block : std::string();
}

// One pixel's RGB from its stored samples, by Pillow's mode of the file.
RgbImage to_rgb(const PngRaster& r) {
  RgbImage out;
  out.width = r.width;
  out.height = r.height;
  out.rgb.resize(static_cast<size_t>(r.width) * r.height * 3);
  const bool wide = r.bit_depth == 16;
  const int channels = r.color_type == PNG_COLOR_TYPE_RGB          ? 3
                       : r.color_type == PNG_COLOR_TYPE_RGB_ALPHA  ? 4
                       : r.color_type == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                                                                   : 1;
  const size_t sample_bytes = wide ? 2 : 1;
  const size_t row_bytes = static_cast<size_t>(r.width) * channels * sample_bytes;
  // Grey of 1, 2, 4 bits: Pillow's "1", "L;2", "L;4" unpackers scale to 0..255.
  const int grey_scale = r.bit_depth == 1 ? 255 : r.bit_depth == 2 ? 85 : r.bit_depth == 4 ? 17 : 1;
  for (png_uint_32 y = 0; y < r.height; ++y) {
    const uint8_t* row = r.samples.data() + y * row_bytes;
    uint8_t* dst = out.rgb.data() + static_cast<size_t>(y) * r.width * 3;
    for (png_uint_32 x = 0; x < r.width; ++x, dst += 3) {
      const uint8_t* s = row + static_cast<size_t>(x) * channels * sample_bytes;
      if (r.color_type == PNG_COLOR_TYPE_PALETTE) {
        const png_color c = s[0] < r.palette.size() ? r.palette[s[0]] : png_color{0, 0, 0};
        dst[0] = c.red, dst[1] = c.green, dst[2] = c.blue;
      } else if (channels >= 3) {
        for (int c = 0; c < 3; ++c) dst[c] = s[c * sample_bytes];  // 16 bits: the high byte
      } else {
        uint8_t v = 0;
        if (!wide) {
          v = static_cast<uint8_t>(s[0] * grey_scale);
        } else if (r.color_type == PNG_COLOR_TYPE_GRAY) {
          v = static_cast<uint8_t>(std::min(s[0] * 256 + s[1], 255));  // I;16 to RGB clips
        } else {
          v = s[0];  // 16-bit grey + alpha opens as RGBA from the high bytes
        }
        dst[0] = dst[1] = dst[2] = v;
      }
    }
  }
  return out;
}


// A chunk type as text for a message: its four bytes where printable, else hex.
std::string printable_chunk_type(std::string_view type) {
  for (const char c : type)
    if (!std::isalpha(static_cast<unsigned char>(c))) return fmt::format("0x{:02x}{:02x}{:02x}{:02x}",
        static_cast<uint8_t>(type[0]), static_cast<uint8_t>(type[1]), static_cast<uint8_t>(type[2]), static_cast<uint8_t>(type[3]));
  return std::string(type);
}

// The size IHDR (the first chunk, by the PNG specification) states, checked before libpng reads
// on: a bomb whose data would follow is refused by its header alone, as Pillow refuses it.
void check_stated_size(std::string_view bytes, const std::string& name, int64_t max_pixels) {
  if (bytes.size() < 24 || bytes.substr(12, 4) != "IHDR") return;  // libpng says what is wrong
  auto u32 = [&](size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(bytes[at + i]);
    return v;
  };
  check_input_image_size(u32(16), u32(20), "PNG", name, max_pixels);
}

// libpng reads a metadata chunk whole into a buffer of its stated length before it finds the
// file shorter: a 444-byte file stating a 2 GB iTXt chunk had it allocate 2 GB. Such a chunk is
// refused first. Image data (IDAT) that runs past the end is libpng's to report, as before.
void check_chunk_lengths(std::string_view bytes, const std::string& name) {
  size_t at = 8;  // past the signature
  while (at + 12 <= bytes.size()) {
    uint64_t length = 0;
    for (size_t i = 0; i < 4; ++i) length = (length << 8) | static_cast<uint8_t>(bytes[at + i]);
    const std::string_view type = bytes.substr(at + 4, 4);
    if (at + 12 + length > bytes.size()) {
      if (type == "IDAT") return;
      fail_input("{}: not a readable PNG: its {} chunk at byte {} states {} bytes, more than the file holds after it",
                 name, printable_chunk_type(type), at, length);
    }
    if (type == "IEND") return;
    at += 12 + length;
  }
}

}  // namespace

DecodedImage decode_png_image(std::string_view bytes, const std::string& name, int64_t max_pixels) {
  check_stated_size(bytes, name, max_pixels);
  check_chunk_lengths(bytes, name);
  PngSource source{bytes};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &source, on_error, on_warning);
  if (!png) fail("{}: libpng could not start", name);
  png_infop info = png_create_info_struct(png);
  png_infop end_info = png_create_info_struct(png);
  png_set_read_fn(png, &source, read_from_memory);
  PngRaster raster;
  bool ok = false;
  try {
    ok = read_raster(png, info, end_info, &raster, name, max_pixels);
  } catch (...) {
    png_destroy_read_struct(&png, &info, &end_info);
    throw;
  }
  png_destroy_read_struct(&png, &info, &end_info);
  if (!ok) fail_input("{}: not a readable PNG: {}", name, source.error);
  if (raster.color_type == PNG_COLOR_TYPE_PALETTE && raster.palette.empty())
    fail_input("{}: not a readable PNG: a palette image without a PLTE chunk", name);
  DecodedImage out;
  out.image = to_rgb(raster);
  out.exif = !raster.exif.empty() ? raster.exif : exif_of_raw_profile(raster.raw_profile_exif);
  out.xmp = raster.xmp;
  return out;
}

}  // namespace ditbatch
