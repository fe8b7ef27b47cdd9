// JPEG input images through libjpeg-turbo with Pillow's settings: libjpeg's defaults (the
// accurate integer IDCT, fancy upsampling), grey as grey, three components as RGB, four as CMYK
// taken as Adobe-inverted and turned into RGB by Pillow's formula. A file that ends early is
// refused, as Pillow refuses it ("image file is truncated"), not filled with grey.
#include <csetjmp>
#include <cstddef>
#include <cstdio>  // before jpeglib.h, which uses size_t and FILE without including them

#include <jerror.h>
#include <jpeglib.h>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "io/image_decoders.h"

namespace ditbatch {

namespace {

struct JpegErrors {
  jpeg_error_mgr manager;
  jmp_buf jump;
  std::string message;
};

void on_error(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  char text[JMSG_LENGTH_MAX];
  cinfo->err->format_message(cinfo, text);
  errors->message = text;
  std::longjmp(errors->jump, 1);
}

// libjpeg goes on past a file that ends early, with grey; Pillow refuses it.
void on_message(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    on_error(cinfo);
  }
}

// Pillow's cmyk2rgb on the inverted samples: nk - c*nk/255, rounded as its MULDIV255.
uint8_t cmyk_channel(int ink, int inverse_black) {
  const int t = ink * inverse_black + 128;
  const int v = inverse_black - (((t >> 8) + t) >> 8);
  return static_cast<uint8_t>(v < 0 ? 0 : v);
}

struct JpegRaster {
  int width = 0, height = 0, components = 0;
  std::vector<uint8_t> samples;  // [height, width, components] as libjpeg gives them
  std::string exif, xmp;
};

void keep_markers(j_decompress_ptr cinfo, JpegRaster* raster) {
  static constexpr std::string_view kExif("Exif\0\0", 6);
  static constexpr std::string_view kXmp("http://ns.adobe.com/xap/1.0/\0", 29);
  for (jpeg_saved_marker_ptr m = cinfo->marker_list; m; m = m->next) {
    const std::string_view data(reinterpret_cast<const char*>(m->data), m->data_length);
    if (m->marker != JPEG_APP0 + 1) continue;
    if (data.starts_with(kExif)) {
      // Pillow joins the blocks of several Exif APP1 markers (each after its header).
      raster->exif.append(raster->exif.empty() ? data : data.substr(kExif.size()));
    } else if (data.starts_with(kXmp)) {
      raster->xmp.assign(data.substr(kXmp.size()));
    }
  }
}

// libjpeg's calls, apart from anything with a destructor (longjmp skips them). `size_error`
// is set when the header names a size past the limit.
bool read_raster(j_decompress_ptr cinfo, JpegErrors* errors, std::string_view bytes, JpegRaster* raster,
                 const std::string& name, int64_t max_pixels, std::string* size_error) {
  if (setjmp(errors->jump)) return false;
  jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(cinfo, TRUE);
  keep_markers(cinfo, raster);  // now: the markers live in the image's pool, gone at the finish
  raster->width = static_cast<int>(cinfo->image_width);
  raster->height = static_cast<int>(cinfo->image_height);
  try {
    check_input_image_size(raster->width, raster->height, "JPEG", name, max_pixels);
  } catch (const InputError& e) {
    *size_error = e.what();
    return false;
  }
  raster->components = cinfo->num_components;
  if (raster->components == 1) {
    cinfo->out_color_space = JCS_GRAYSCALE;
  } else if (raster->components == 3) {
    cinfo->out_color_space = JCS_RGB;
  } else if (raster->components == 4) {
    cinfo->out_color_space = JCS_CMYK;
  } else {
    errors->message = "a JPEG of " + std::to_string(raster->components) + " components (Pillow reads 1, 3 or 4)";
    return false;
  }
  jpeg_start_decompress(cinfo);
  const size_t row_bytes = static_cast<size_t>(raster->width) * raster->components;
  raster->samples.resize(row_bytes * raster->height);
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = raster->samples.data() + cinfo->output_scanline * row_bytes;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

RgbImage to_rgb(const JpegRaster& r) {
  RgbImage out;
  out.width = r.width;
  out.height = r.height;
  out.rgb.resize(static_cast<size_t>(r.width) * r.height * 3);
  const size_t pixels = static_cast<size_t>(r.width) * r.height;
  for (size_t i = 0; i < pixels; ++i) {
    const uint8_t* s = r.samples.data() + i * r.components;
    uint8_t* d = out.rgb.data() + i * 3;
    if (r.components == 1) {
      d[0] = d[1] = d[2] = s[0];
    } else if (r.components == 3) {
      d[0] = s[0], d[1] = s[1], d[2] = s[2];
    } else {
      const int inverse_black = s[3];  // 255 - k of the inverted sample: the stored value
      for (int c = 0; c < 3; ++c) d[c] = cmyk_channel(255 - s[c], inverse_black);
    }
  }
  return out;
}

}  // namespace

DecodedImage decode_jpeg_image(std::string_view bytes, const std::string& name, int64_t max_pixels) {
  jpeg_decompress_struct cinfo{};
  JpegErrors errors;
  cinfo.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = on_error;
  errors.manager.emit_message = on_message;
  jpeg_create_decompress(&cinfo);
  JpegRaster raster;
  std::string size_error;
  const bool ok = read_raster(&cinfo, &errors, bytes, &raster, name, max_pixels, &size_error);
  jpeg_destroy_decompress(&cinfo);
  if (!size_error.empty()) throw InputError(size_error);
  if (!ok) fail_input("{}: not a readable JPEG: {}", name, errors.message);
  DecodedImage out;
  out.image = to_rgb(raster);
  out.exif = std::move(raster.exif);
  out.xmp = std::move(raster.xmp);
  return out;
}

}  // namespace ditbatch
