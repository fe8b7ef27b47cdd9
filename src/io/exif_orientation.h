// The orientation of an input image as Pillow's getexif() finds it (tag 0x0112 of the EXIF
// block's first directory, else tiff:Orientation in an XMP packet), and the turn that
// PIL.ImageOps.exif_transpose makes of it.
#pragma once

#include <string>

#include "io/rgb_image.h"

namespace ditbatch {

// 1..8 as the file says; 1 (as stored) where it says nothing readable, as Pillow reads a
// damaged block (a warning, no orientation).
int image_orientation(const std::string& exif, const std::string& xmp);

// The image turned upright: orientation 2 mirrors, 3 turns 180 degrees, 6 turns 90 clockwise,
// 8 counter-clockwise, 5 and 7 transpose; any other value leaves it as it is.
RgbImage apply_orientation(RgbImage image, int orientation);

}  // namespace ditbatch
