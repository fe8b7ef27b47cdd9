#include "io/png_io.h"

#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <memory>

#include "core/error.h"
#include "core/fs.h"

namespace ditbatch {

namespace {

void on_png_error(png_structp png, png_const_charp message) {
  auto* out = static_cast<std::string*>(png_get_error_ptr(png));
  if (out) *out = message;
  png_longjmp(png, 1);
}

void on_png_warning(png_structp, png_const_charp) {}

void append_to_string(png_structp png, png_bytep data, png_size_t length) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), length);
}

void no_flush(png_structp) {}

}  // namespace

namespace {

// The libpng calls that may longjmp, in a frame that holds no C++ objects (setjmp/longjmp
// must not skip destructors). Returns false with `error` set by on_png_error.
bool write_png_frame(png_structp png, png_infop info, std::string* bytes, const uint8_t* pixels, int64_t width,
                     int64_t height, int channels, png_text* chunks, int n_chunks) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_write_fn(png, bytes, append_to_string, no_flush);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               channels == 4 ? PNG_COLOR_TYPE_RGB_ALPHA : PNG_COLOR_TYPE_RGB,               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(png, 6);
  if (n_chunks > 0) png_set_text(png, info, chunks, n_chunks);
  png_write_info(png, info);
  for (int64_t y = 0; y < height; ++y) png_write_row(png, const_cast<png_bytep>(pixels + y * width * channels));
  png_write_end(png, info);
  return true;
}

}  // namespace

std::string encode_png(const uint8_t* pixels, int64_t width, int64_t height, int channels, const PngText& text) {
  DITBATCH_CHECK(channels == 3 || channels == 4, "encode_png: {} channels (3 or 4)", channels);
  std::string error, bytes;
  std::vector<png_text> chunks(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    chunks[i].compression = PNG_ITXT_COMPRESSION_NONE;  // iTXt: UTF-8 text
    chunks[i].key = const_cast<char*>(text[i].first.c_str());
    chunks[i].text = const_cast<char*>(text[i].second.c_str());
    chunks[i].itxt_length = text[i].second.size();
    chunks[i].lang = const_cast<char*>("");
    chunks[i].lang_key = const_cast<char*>("");
  }
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &error, on_png_error, on_png_warning);
  if (!png) fail("libpng: cannot create a write struct");
  png_infop info = png_create_info_struct(png);
  const bool ok = write_png_frame(png, info, &bytes, pixels, width, height, channels, chunks.data(), static_cast<int>(chunks.size()));
  png_destroy_write_struct(&png, &info);
  if (!ok) fail("libpng: cannot encode the image: {}", error);
  return bytes;
}

std::string write_png_atomic(const std::string& path, const uint8_t* pixels, int64_t width, int64_t height,
                             int channels, const PngText& text) {
  std::string bytes = encode_png(pixels, width, height, channels, text);
  write_file_atomic(path, bytes);
  return bytes;
}

namespace {

// Reads every chunk up to and including IEND, checking CRCs (a cut file fails here), in a
// frame without C++ objects because libpng reports errors by longjmp.
bool read_png_frame(png_structp png, png_infop info, std::FILE* f) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_init_io(png, f);
  png_set_sig_bytes(png, 8);
  png_read_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  return true;
}

bool read_png_impl(const std::string& path, PngImage* out, std::string* error) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    *error = "cannot open";
    return false;
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(f, std::fclose);
  png_byte signature[8];
  if (std::fread(signature, 1, 8, f) != 8 || png_sig_cmp(signature, 0, 8) != 0) {
    *error = "not a PNG file";
    return false;
  }
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, error, on_png_error, on_png_warning);
  png_infop info = png_create_info_struct(png);
  bool ok = read_png_frame(png, info, f);
  if (ok && out) {
    out->width = png_get_image_width(png, info);
    out->height = png_get_image_height(png, info);
    const int color = png_get_color_type(png, info);
    if ((color != PNG_COLOR_TYPE_RGB && color != PNG_COLOR_TYPE_RGB_ALPHA) || png_get_bit_depth(png, info) != 8) {
      *error = "not an 8-bit RGB or RGBA PNG";
      ok = false;
    } else {
      png_bytepp rows = png_get_rows(png, info);
      out->channels = color == PNG_COLOR_TYPE_RGB_ALPHA ? 4 : 3;
      const int64_t row = out->width * out->channels;
      out->pixels.resize(static_cast<size_t>(row * out->height));
      for (int64_t y = 0; y < out->height; ++y) std::copy(rows[y], rows[y] + row, out->pixels.begin() + y * row);
      png_textp text = nullptr;
      const int n = png_get_text(png, info, &text, nullptr);
      for (int i = 0; i < n; ++i)
        out->text.emplace_back(text[i].key, std::string(text[i].text, text[i].compression > 0 ? text[i].itxt_length
                                                                                               : text[i].text_length));
    }
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return ok;
}

}  // namespace

bool png_is_complete(const std::string& path) {
  std::string error;
  return read_png_impl(path, nullptr, &error);
}

PngImage read_png(const std::string& path) {
  PngImage image;
  std::string error;
  if (!read_png_impl(path, &image, &error)) fail_input("{}: cannot read as PNG: {}", path, error);
  return image;
}

}  // namespace ditbatch
