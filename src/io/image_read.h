// Input images (the Edit models' "image" of a prompt line): PNG, JPEG and WebP files decoded by
// their own libraries (libpng, libjpeg-turbo, libwebp) into the image diffusers' load_image makes
// of them: Pillow opens the file, PIL.ImageOps.exif_transpose applies its orientation, then
// convert("RGB"). Pillow's rules are followed where they are not the obvious ones, since one
// level of difference at the input moves the edited image:
//   - alpha is dropped, never composited; a palette's transparency is ignored, and an index past
//     the palette is black;
//   - 16-bit grey is clipped to 255 (Pillow's I;16), every other 16-bit sample keeps its high
//     byte; 1-, 2- and 4-bit grey scale by 255, 85 and 17;
//   - a CMYK JPEG is taken as Adobe-inverted and turned into RGB by Pillow's own formula;
//   - the orientation comes from the EXIF block (JPEG APP1, PNG eXIf or its "Raw profile type
//     exif" text, WebP EXIF), else from an XMP packet's tiff:Orientation;
//   - a file of more than twice Pillow's MAX_IMAGE_PIXELS is refused (Pillow's
//     DecompressionBombError), before its pixels are decoded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "io/rgb_image.h"

namespace ditbatch {

// Pillow's Image.MAX_IMAGE_PIXELS; an image of more than twice this many pixels is refused.
inline constexpr int64_t kPillowMaxImagePixels = 89'478'485;
inline constexpr int64_t kMaxInputImagePixels = 2 * kPillowMaxImagePixels;

// The largest input image file read (a 16-bit PNG at the pixel limit fits several times over).
inline constexpr int64_t kMaxInputImageBytes = int64_t{1} << 30;

// The image `bytes` hold; `name` (the file) starts every error: "photos/a.png: not a readable
// PNG: ...". An image of more than max_pixels is refused by its header. Throws InputError.
RgbImage decode_input_image(std::string_view bytes, const std::string& name,
                            int64_t max_pixels = kMaxInputImagePixels);

// The file's format by its first bytes: "PNG", "JPEG", "WebP", or "" for none of them.
std::string input_image_format(std::string_view bytes);

}  // namespace ditbatch
