#include "io/exif_orientation.h"

#include <cstdint>
#include <string_view>

namespace ditbatch {

namespace {

constexpr uint16_t kOrientationTag = 0x0112;

// The TIFF structure of an EXIF block, read with bounds on every offset (the block comes from
// the file as it is).
class TiffReader {
 public:
  explicit TiffReader(std::string_view block) : b_(block) {}
  bool little_endian() const { return b_.substr(0, 2) == "II"; }
  bool valid_header() const { return b_.size() >= 8 && (b_.substr(0, 4) == std::string_view("II*\0", 4) ||
                                                         b_.substr(0, 4) == std::string_view("MM\0*", 4)); }
  bool has(size_t offset, size_t n) const { return offset <= b_.size() && n <= b_.size() - offset; }
  uint32_t u16(size_t at) const { return ordered(at, 2); }
  uint32_t u32(size_t at) const { return ordered(at, 4); }

 private:
  uint32_t ordered(size_t at, int n) const {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      const uint32_t byte = static_cast<uint8_t>(b_[at + (little_endian() ? n - 1 - i : i)]);
      v = (v << 8) | byte;
    }
    return v;
  }
  std::string_view b_;
};

int exif_orientation(std::string_view block) {
  if (block.starts_with(std::string_view("Exif\0\0", 6))) block.remove_prefix(6);
  const TiffReader tiff(block);
  if (!tiff.valid_header()) return 1;
  const size_t ifd = tiff.u32(4);
  if (!tiff.has(ifd, 2)) return 1;
  const uint32_t entries = tiff.u16(ifd);
  for (uint32_t i = 0; i < entries; ++i) {
    const size_t entry = ifd + 2 + size_t{12} * i;
    if (!tiff.has(entry, 12)) return 1;
    if (tiff.u16(entry) != kOrientationTag) continue;
    const uint32_t type = tiff.u16(entry + 2), count = tiff.u32(entry + 4);
    if (count != 1) return 1;  // Pillow reads a tuple, which names no turn
    switch (type) {
      case 1: case 6: return static_cast<uint8_t>(block[entry + 8]);   // BYTE, SBYTE
      case 3: case 8: return static_cast<int>(tiff.u16(entry + 8));     // SHORT, SSHORT
      case 4: case 9: return static_cast<int>(tiff.u32(entry + 8));     // LONG, SLONG
      default: return 1;
    }
  }
  return 0;  // no tag: the XMP packet may say
}

// Pillow's pattern r'tiff:Orientation(="|>)([0-9])', its first match.
int xmp_orientation(std::string_view xmp) {
  static constexpr std::string_view kKey = "tiff:Orientation";
  for (size_t at = xmp.find(kKey); at != std::string_view::npos; at = xmp.find(kKey, at + 1)) {
    const std::string_view rest = xmp.substr(at + kKey.size());
    if (rest.starts_with("=\"") && rest.size() > 2 && rest[2] >= '0' && rest[2] <= '9') return rest[2] - '0';
    if (rest.starts_with(">") && rest.size() > 1 && rest[1] >= '0' && rest[1] <= '9') return rest[1] - '0';
  }
  return 1;
}

}  // namespace

int image_orientation(const std::string& exif, const std::string& xmp) {
  const int from_exif = exif.empty() ? 0 : exif_orientation(exif);
  return from_exif != 0 ? from_exif : xmp_orientation(xmp);
}

RgbImage apply_orientation(RgbImage image, int orientation) {
  if (orientation < 2 || orientation > 8) return image;
  const int64_t w = image.width, h = image.height;
  const bool swaps = orientation >= 5;  // the turns by 90 degrees and the transposes
  RgbImage out;
  out.width = swaps ? h : w;
  out.height = swaps ? w : h;
  out.rgb.resize(image.rgb.size());
  for (int64_t y = 0; y < out.height; ++y) {
    for (int64_t x = 0; x < out.width; ++x) {
      int64_t sy = 0, sx = 0;  // the source pixel of output (y, x)
      switch (orientation) {
        case 2: sy = y, sx = w - 1 - x; break;              // FLIP_LEFT_RIGHT
        case 3: sy = h - 1 - y, sx = w - 1 - x; break;      // ROTATE_180
        case 4: sy = h - 1 - y, sx = x; break;              // FLIP_TOP_BOTTOM
        case 5: sy = x, sx = y; break;                      // TRANSPOSE
        case 6: sy = h - 1 - x, sx = y; break;              // ROTATE_270 (clockwise)
        case 7: sy = h - 1 - x, sx = w - 1 - y; break;      // TRANSVERSE
        case 8: sy = x, sx = w - 1 - y; break;              // ROTATE_90 (counter-clockwise)
      }
      for (int c = 0; c < 3; ++c) out.rgb[static_cast<size_t>((y * out.width + x) * 3 + c)] = image.at(sy, sx, c);
    }
  }
  return out;
}

}  // namespace ditbatch
