// WebP input images through libwebp's animation decoder, as Pillow reads every WebP file: the
// first frame on its canvas, RGBA not premultiplied (the colour under a transparent pixel is
// the stored colour), alpha then dropped; the EXIF and XMP chunks from the demuxer.
#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>
#include <memory>
#include <string_view>

#include "core/error.h"
#include "io/image_decoders.h"

namespace ditbatch {

namespace {

std::string chunk_text(const WebPDemuxer* demux, const char* fourcc) {
  WebPChunkIterator it;
  if (!WebPDemuxGetChunk(demux, fourcc, 1, &it)) return {};
  std::string text(reinterpret_cast<const char*>(it.chunk.bytes), it.chunk.size);
  WebPDemuxReleaseChunkIterator(&it);
  return text;
}

}  // namespace

DecodedImage decode_webp_image(std::string_view bytes, const std::string& name, int64_t max_pixels) {
  WebPData data{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
  // The canvas size from the header, checked before the decoder allocates the canvas.
  WebPBitstreamFeatures features;
  if (WebPGetFeatures(data.bytes, data.size, &features) != VP8_STATUS_OK)
    fail_input("{}: not a readable WebP: its header does not parse", name);
  const std::unique_ptr<WebPDemuxer, decltype(&WebPDemuxDelete)> demux(WebPDemux(&data), WebPDemuxDelete);
  if (!demux) fail_input("{}: not a readable WebP: its chunks do not parse (truncated?)", name);
  check_input_image_size(WebPDemuxGetI(demux.get(), WEBP_FF_CANVAS_WIDTH),
                         WebPDemuxGetI(demux.get(), WEBP_FF_CANVAS_HEIGHT), "WebP", name, max_pixels);

  WebPAnimDecoderOptions options;
  WebPAnimDecoderOptionsInit(&options);
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  const std::unique_ptr<WebPAnimDecoder, decltype(&WebPAnimDecoderDelete)> decoder(
      WebPAnimDecoderNew(&data, &options), WebPAnimDecoderDelete);
  if (!decoder) fail_input("{}: not a readable WebP: libwebp cannot decode it", name);
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(decoder.get(), &info)) fail_input("{}: not a readable WebP", name);
  uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(decoder.get(), &rgba, &timestamp) || !rgba)
    fail_input("{}: not a readable WebP: its first frame does not decode (truncated?)", name);

  DecodedImage out;
  out.image.width = info.canvas_width;
  out.image.height = info.canvas_height;
  const size_t pixels = static_cast<size_t>(info.canvas_width) * info.canvas_height;
  out.image.rgb.resize(pixels * 3);
  for (size_t i = 0; i < pixels; ++i) std::memcpy(&out.image.rgb[i * 3], rgba + i * 4, 3);
  out.exif = chunk_text(demux.get(), "EXIF");
  out.xmp = chunk_text(demux.get(), "XMP ");
  return out;
}

}  // namespace ditbatch
