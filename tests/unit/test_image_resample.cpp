// Pillow's BICUBIC and LANCZOS resize bit for bit, and the Edit pipelines' size rules
// (calculate_dimensions, smart_resize) exactly, against image_processor.h5.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "image_golden.h"
#include "model/edit_image_sizes.h"
#include "model/image_resample.h"

using namespace ditbatch;

namespace {

RgbImage resize_with(const std::string& filter, const RgbImage& image, int64_t width, int64_t height) {
  if (filter == "bicubic") return resize_bicubic(image, width, height);
  if (filter == "lanczos") return resize_lanczos(image, width, height);
  ADD_FAILURE() << "unknown filter " << filter;
  return {};
}

RgbImage noise_image(int64_t width, int64_t height, uint32_t seed) {
  RgbImage image{width, height, std::vector<uint8_t>(static_cast<size_t>(width * height * 3))};
  for (uint8_t& v : image.rgb) {
    seed = seed * 1664525u + 1013904223u;
    v = static_cast<uint8_t>(seed >> 24);
  }
  return image;
}

}  // namespace

TEST(ImageResample, BicubicAndLanczosMatchPillowBitForBit) {
  h5::File f = test::image_golden();
  const h5::Group root = f.root(), cases = root.open_group("resize");
  int checked = 0, copies = 0;
  for (const std::string& name : cases.members()) {
    const h5::Group c = cases.open_group(name);
    const RgbImage source = test::golden_source(root, c.attr_string("source"));
    const RgbImage want = test::read_rgb_image(c, "image");
    const int64_t width = c.attr_int("width"), height = c.attr_int("height");
    ASSERT_EQ(want.width, width) << name;
    ASSERT_EQ(want.height, height) << name;
    EXPECT_TRUE(test::same_image(resize_with(c.attr_string("filter"), source, width, height), want))
        << name << ": " << c.attr_string("filter") << " " << source.width << "x" << source.height << " -> " << width
        << "x" << height;
    copies += width == source.width && height == source.height;
    ++checked;
  }
  EXPECT_EQ(checked, 68);
  EXPECT_EQ(copies, 2);  // the same-size case, under both filters
}

TEST(ImageResample, OneAxisResizeLeavesTheOtherAxisUntouched) {
  // Pillow skips the pass of an axis whose size stays: each output column (row) is then a 1-D
  // resize of the input's, whatever its neighbours hold.
  const RgbImage image = noise_image(13, 9, 7);
  const RgbImage taller = resize_lanczos(image, 13, 20);
  RgbImage column{1, 9, {}};
  for (int64_t y = 0; y < 9; ++y)
    for (int c = 0; c < 3; ++c) column.rgb.push_back(image.at(y, 5, c));
  const RgbImage column_taller = resize_lanczos(column, 1, 20);
  for (int64_t y = 0; y < 20; ++y)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(taller.at(y, 5, c), column_taller.at(y, 0, c)) << y << " " << c;
}

TEST(ImageResample, BadSizesAreInputErrors) {
  const RgbImage image = noise_image(6, 4, 3);
  for (const auto& size : {std::pair<int64_t, int64_t>{0, 4}, {6, 0}, {-3, 4}, {int64_t{1} << 33, 4}}) {
    const int64_t w = size.first, h = size.second;  // (clang 14: a lambda may not capture a structured binding)
    const std::string message = test::input_error_of([&] { resize_bicubic(image, w, h); });
    EXPECT_NE(message.find(std::to_string(w) + "x" + std::to_string(h)), std::string::npos) << message;
    EXPECT_NE(message.find("must be"), std::string::npos) << message;
  }
  EXPECT_NE(test::input_error_of([] { resize_lanczos(RgbImage{}, 4, 4); }).find("0x0"), std::string::npos);
  RgbImage short_buffer = image;
  short_buffer.rgb.pop_back();
  EXPECT_NE(test::input_error_of([&] { resize_lanczos(short_buffer, 4, 4); }).find("71 bytes, expected 72"),
            std::string::npos);
}

TEST(EditImageSizes, CalculateDimensionsMatchesBothPipelinesTiesIncluded) {
  h5::File f = test::image_golden();
  const h5::Group g = f.root().open_group("calculate_dimensions");
  const std::vector<int64_t> areas = g.attr_ints("target_areas");
  const std::vector<double> ratios = g.attr_doubles("ratios");
  const Tensor width = g.read_tensor("width"), height = g.read_tensor("height");  // [module, area, ratio]
  ASSERT_EQ(width.shape(), (Shape{2, static_cast<int64_t>(areas.size()), static_cast<int64_t>(ratios.size())}));
  EXPECT_GE(g.attr_int("ties"), 10);  // cases where Python's round meets an exact .5
  for (size_t a = 0; a < areas.size(); ++a)
    for (size_t r = 0; r < ratios.size(); ++r) {
      const ImageSize size = calculate_dimensions(areas[a], ratios[r]);
      for (int64_t module = 0; module < 2; ++module) {  // QwenImageEditPipeline's, then Edit-Plus's
        const size_t i = (static_cast<size_t>(module) * areas.size() + a) * ratios.size() + r;
        EXPECT_EQ(size.width, width.data<int64_t>()[i]) << "area " << areas[a] << " ratio " << ratios[r];
        EXPECT_EQ(size.height, height.data<int64_t>()[i]) << "area " << areas[a] << " ratio " << ratios[r];
      }
    }
}

TEST(EditImageSizes, CalculateDimensionsRefusesBadRatiosAndAreas) {
  for (double ratio : {0.0, -1.0, std::nan(""), HUGE_VAL})
    EXPECT_NE(test::input_error_of([&] { calculate_dimensions(1024 * 1024, ratio); }).find("aspect ratio"),
              std::string::npos);
  EXPECT_NE(test::input_error_of([] { calculate_dimensions(0, 1.0); }).find("target area 0"), std::string::npos);
  EXPECT_NE(test::input_error_of([] { calculate_dimensions(1024 * 1024, 1e30); }).find("past"), std::string::npos);
}

TEST(EditImageSizes, SmartResizeMatchesTransformers) {
  h5::File f = test::image_golden();
  const h5::Group g = f.root().open_group("smart_resize");
  const std::vector<int64_t> budgets = g.attr_ints("budgets");  // (factor, min_pixels, max_pixels) each
  const Tensor sizes = g.read_tensor("sizes"), resized = g.read_tensor("resized");
  const int64_t n = sizes.dim(0);
  ASSERT_EQ(resized.shape(), (Shape{static_cast<int64_t>(budgets.size() / 3), n, 2}));
  int hit_max = 0, hit_min = 0;
  for (size_t b = 0; b < budgets.size() / 3; ++b) {
    const int64_t factor = budgets[3 * b], min_pixels = budgets[3 * b + 1], max_pixels = budgets[3 * b + 2];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t h = sizes.data<int64_t>()[2 * i], w = sizes.data<int64_t>()[2 * i + 1];
      const int64_t* want = &resized.data<int64_t>()[(static_cast<int64_t>(b) * n + i) * 2];
      const ImageSize got = smart_resize(h, w, factor, min_pixels, max_pixels);
      EXPECT_EQ(got.height, want[0]) << h << "x" << w << " factor " << factor << " max " << max_pixels;
      EXPECT_EQ(got.width, want[1]) << h << "x" << w << " factor " << factor << " max " << max_pixels;
      const double rounded = std::nearbyint(static_cast<double>(h) / static_cast<double>(factor)) *
                             std::nearbyint(static_cast<double>(w) / static_cast<double>(factor)) *
                             static_cast<double>(factor * factor);
      hit_max += rounded > static_cast<double>(max_pixels);
      hit_min += rounded < static_cast<double>(min_pixels);
    }
  }
  EXPECT_GT(hit_max, 20);  // both branches of the budget are exercised
  EXPECT_GT(hit_min, 20);
}

TEST(EditImageSizes, SmartResizeRefusesExtremeAspectAndEmptyImages) {
  h5::File f = test::image_golden();
  const Tensor raising = f.root().open_group("smart_resize").read_tensor("raising");  // where transformers raised
  ASSERT_GT(raising.dim(0), 0);
  for (int64_t i = 0; i < raising.dim(0); ++i) {
    const int64_t h = raising.data<int64_t>()[2 * i], w = raising.data<int64_t>()[2 * i + 1];
    const std::string message = test::input_error_of([&] { smart_resize(h, w, 28, 3136, 12845056); });
    EXPECT_NE(message.find("aspect ratio"), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(h) + "x" + std::to_string(w)), std::string::npos) << message;
  }
  EXPECT_NO_THROW(smart_resize(1, 200, 28, 3136, 12845056));  // an aspect of 200 itself is allowed
  EXPECT_NE(test::input_error_of([] { smart_resize(0, 10, 28, 3136, 1003520); }).find("0x10"), std::string::npos);
  EXPECT_NE(test::input_error_of([] { smart_resize(10, 10, 0, 3136, 1003520); }).find("factor 0"), std::string::npos);
  EXPECT_NE(test::input_error_of([] { smart_resize(10, 10, 28, 3136, 0); }).find("max_pixels 0"), std::string::npos);
}
