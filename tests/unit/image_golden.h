// Reading tests/data/golden/image_processor.h5 (make_goldens.py's stage image_processor): its
// source images and the large pattern image it makes by formula instead of storing.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>  // size_t, which io/rgb_image.h uses without including it
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/sha256.h"
#include "io/h5.h"
#include "io/rgb_image.h"
#include "test_util.h"

namespace ditbatch::test {

inline h5::File image_golden() {
  return h5::File::open_read(golden("image_processor.h5"));
}

// A [height, width, 3] uint8 dataset as an image.
inline RgbImage read_rgb_image(const h5::Group& group, const std::string& name) {
  Tensor t = group.read_tensor(name);
  EXPECT_EQ(t.dtype(), DType::U8) << name;
  EXPECT_EQ(t.shape().size(), 3u) << name;
  EXPECT_EQ(t.dim(2), 3) << name;
  RgbImage image{t.dim(1), t.dim(0), std::vector<uint8_t>(t.nbytes())};
  std::memcpy(image.rgb.data(), t.data<uint8_t>(), t.nbytes());
  return image;
}

// make_goldens.py's pattern_image: ((7x + 3y + 85c) ^ ((31xy + 17c) >> 3)) & 255.
inline RgbImage pattern_image(int64_t width, int64_t height) {
  RgbImage image{width, height, std::vector<uint8_t>(static_cast<size_t>(width * height * 3))};
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x)
      for (int64_t c = 0; c < 3; ++c)
        image.rgb[static_cast<size_t>((y * width + x) * 3 + c)] =
            static_cast<uint8_t>(((x * 7 + y * 3 + c * 85) ^ ((x * y * 31 + c * 17) >> 3)) & 255);
  return image;
}

// A source of the golden by name: sources/<name>, or pattern_<w>x<h>.
inline RgbImage golden_source(const h5::Group& root, const std::string& name) {
  int64_t width = 0, height = 0;
  if (std::sscanf(name.c_str(), "pattern_%ldx%ld", &width, &height) == 2) return pattern_image(width, height);
  return read_rgb_image(root.open_group("sources"), name);
}

inline std::string sha256_of(const std::vector<float>& values) {
  return sha256_hex(std::string_view(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
}
inline std::string sha256_of(const RgbImage& image) {
  return sha256_hex(std::string_view(reinterpret_cast<const char*>(image.rgb.data()), image.rgb.size()));
}

// How many bytes of two images differ (the sizes compared first), with the first one described.
inline ::testing::AssertionResult same_image(const RgbImage& got, const RgbImage& want) {
  if (got.width != want.width || got.height != want.height)
    return ::testing::AssertionFailure() << "size " << got.width << "x" << got.height << ", expected " << want.width
                                         << "x" << want.height;
  if (got.rgb.size() != want.rgb.size()) return ::testing::AssertionFailure() << "byte count " << got.rgb.size();
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < got.rgb.size(); ++i)
    if (got.rgb[i] != want.rgb[i] && differ++ == 0) first = i;
  if (differ == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << differ << " of " << got.rgb.size() << " bytes differ; first at pixel ("
                                       << first / 3 % static_cast<size_t>(got.width) << ", "
                                       << first / 3 / static_cast<size_t>(got.width) << ") channel " << first % 3
                                       << ": " << int{got.rgb[first]} << " vs " << int{want.rgb[first]};
}

}  // namespace ditbatch::test
