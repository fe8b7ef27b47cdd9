// The Qwen2-VL image processor (transformers' PIL backend), VaeImageProcessor.preprocess and the
// Edit pipelines' two images per input, exactly against image_processor.h5; and the
// preprocessor_config.json parser's defaults and errors.
#include <gtest/gtest.h>

#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "image_golden.h"
#include "model/edit_image_inputs.h"
#include "model/image_resample.h"
#include "model/qwen2vl_image_processor.h"

using namespace ditbatch;

namespace {

// Bit equality of `count` floats, with the first difference described.
::testing::AssertionResult same_floats(const float* got, const float* want, int64_t count) {
  int64_t differ = 0, first = 0;
  for (int64_t i = 0; i < count; ++i)
    if (f32_bits(got[i]) != f32_bits(want[i]) && differ++ == 0) first = i;
  if (differ == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << differ << " of " << count << " values differ; first at " << first << ": "
                                       << got[first] << " vs " << want[first];
}

const std::string kConfigFile = "processor/preprocessor_config.json";

std::string config_error(const std::string& text) {
  return test::input_error_of([&] { Qwen2VLImageProcessorConfig::parse(text, kConfigFile); });
}

}  // namespace

TEST(Qwen2VLImageProcessor, PixelValuesAndGridsEqualTransformersPil) {
  h5::File f = test::image_golden();
  const h5::Group root = f.root(), configs = root.open_group("qwen2vl");
  int images = 0, full = 0;
  for (const std::string& config_name : configs.members()) {
    const h5::Group cg = configs.open_group(config_name);
    const auto config = Qwen2VLImageProcessorConfig::parse(cg.attr_string("preprocessor_config"), config_name);
    EXPECT_EQ(config.min_pixels, cg.attr_int("min_pixels")) << config_name;
    EXPECT_EQ(config.max_pixels, cg.attr_int("max_pixels")) << config_name;
    for (const std::string& name : cg.members()) {
      const h5::Group c = cg.open_group(name);
      const Qwen2VLImageInputs got = qwen2vl_process_image(test::golden_source(root, name), config);
      const std::string where = config_name + "/" + name;
      const std::vector<int64_t> shape = c.attr_ints("pixel_values_shape");  // [Np, 1176]
      ASSERT_EQ(got.num_patches, shape[0]) << where;
      ASSERT_EQ(got.patch_dim, shape[1]) << where;
      ASSERT_EQ(got.pixel_values.size(), static_cast<size_t>(shape[0] * shape[1])) << where;
      const Tensor grid = c.read_tensor("image_grid_thw");  // [1, 3]
      ASSERT_EQ(got.grid_thw.size(), 1u) << where;
      for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(got.grid_thw[0][k], grid.data<int64_t>()[k]) << where << " grid " << k;
      if (c.has_dataset("pixel_values")) {
        const Tensor want = c.read_tensor("pixel_values");
        EXPECT_TRUE(same_floats(got.pixel_values.data(), want.data<float>(), want.numel())) << where;
        ++full;
      } else {  // sampled rows for a readable first difference; the hash covers every row
        const Tensor rows = c.read_tensor("sample_rows"), want = c.read_tensor("pixel_values_sample");
        for (int64_t i = 0; i < rows.numel(); ++i)
          EXPECT_TRUE(same_floats(&got.pixel_values[static_cast<size_t>(rows.data<int64_t>()[i] * shape[1])],
                                  want.data<float>() + i * shape[1], shape[1]))
              << where << " row " << rows.data<int64_t>()[i];
      }
      EXPECT_EQ(test::sha256_of(got.pixel_values), c.attr_string("pixel_values_sha256")) << where;
      ++images;
    }
  }
  EXPECT_EQ(images, 12);
  EXPECT_EQ(full, 2);
}

TEST(Qwen2VLImageProcessor, SeveralImagesConcatenateRowsInOrder) {
  h5::File f = test::image_golden();
  const h5::Group root = f.root();
  const RgbImage a = test::golden_source(root, "noise_64x48"), b = test::golden_source(root, "noise_37x23");
  const Qwen2VLImageProcessorConfig config;
  const Qwen2VLImageInputs both = qwen2vl_process_images({a, b}, config);
  const Qwen2VLImageInputs first = qwen2vl_process_image(a, config), second = qwen2vl_process_image(b, config);
  ASSERT_EQ(both.num_patches, first.num_patches + second.num_patches);
  ASSERT_EQ(both.grid_thw.size(), 2u);
  EXPECT_EQ(both.grid_thw[0], first.grid_thw[0]);
  EXPECT_EQ(both.grid_thw[1], second.grid_thw[0]);
  std::vector<float> joined = first.pixel_values;
  joined.insert(joined.end(), second.pixel_values.begin(), second.pixel_values.end());
  EXPECT_TRUE(same_floats(both.pixel_values.data(), joined.data(), static_cast<int64_t>(joined.size())));
}

TEST(Qwen2VLImageProcessor, ConfigDefaultsAndOverridesFollowTheClass) {
  const auto absent = Qwen2VLImageProcessorConfig::parse("{}", kConfigFile);
  EXPECT_EQ(absent.max_pixels, 28 * 28 * 1280);
  EXPECT_EQ(absent.min_pixels, 56 * 56);
  EXPECT_EQ(absent.patch_dim(), 1176);
  const auto sized = Qwen2VLImageProcessorConfig::parse(
      R"({"size": {"shortest_edge": 100, "longest_edge": 5000}, "min_pixels": 200, "patch_size": 16,
          "image_mean": 0.5, "image_std": [0.25, 0.5, 2], "resample": 3, "do_resize": true})",
      kConfigFile);
  EXPECT_EQ(sized.min_pixels, 200);  // min_pixels wins over size.shortest_edge, as in __init__
  EXPECT_EQ(sized.max_pixels, 5000);
  EXPECT_EQ(sized.patch_dim(), 3 * 2 * 16 * 16);
  EXPECT_EQ(sized.image_mean, (std::array<float, 3>{0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(sized.image_std, (std::array<float, 3>{0.25f, 0.5f, 2.0f}));
}

TEST(Qwen2VLImageProcessor, BadConfigFieldsAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"max_pixels": "many"})", "'max_pixels'"},
      {R"({"max_pixels": 0})", "'max_pixels'"},
      {R"({"min_pixels": 5000, "max_pixels": 4000})", "min_pixels 5000 is more than max_pixels 4000"},
      {R"({"size": {"longest_edge": -1}})", "'size.longest_edge'"},
      {R"({"patch_size": 0})", "'patch_size'"},
      {R"({"merge_size": 1.5})", "'merge_size'"},
      {R"({"resample": 2})", "'resample' = 2"},
      {R"({"do_normalize": false})", "'do_normalize'"},
      {R"({"rescale_factor": -1})", "'rescale_factor'"},
      {R"({"image_mean": [0.5, 0.5]})", "'image_mean'"},
      {R"({"image_std": [0.5, "x", 0.5]})", "'image_std'"},
      {R"({"image_std": [0.5, 0, 0.5]})", "'image_std' has a zero"},
      {R"([1, 2])", "JSON object"},
  };
  for (const auto& [text, field] : cases) {
    const std::string message = config_error(text);
    EXPECT_NE(message.find(kConfigFile), std::string::npos) << text << ": " << message;
    EXPECT_NE(message.find(field), std::string::npos) << text << ": " << message;
  }
}

TEST(Qwen2VLImageProcessor, ExtremeAspectIsAnInputError) {
  RgbImage strip{250, 1, std::vector<uint8_t>(250 * 3, 77)};
  EXPECT_NE(
      test::input_error_of([&] { qwen2vl_process_image(strip, Qwen2VLImageProcessorConfig{}); }).find("aspect ratio"),
      std::string::npos);
}

TEST(VaePreprocess, EqualsDiffusersVaeImageProcessor) {
  h5::File f = test::image_golden();
  const h5::Group root = f.root(), cases = root.open_group("vae_preprocess");
  int checked = 0;
  for (const std::string& name : cases.members()) {
    const h5::Group c = cases.open_group(name);
    const int64_t width = c.attr_int("width"), height = c.attr_int("height");
    // VaeImageProcessor.preprocess resizes with Lanczos (a copy at the same size) first.
    const VaeImageInput got =
        vae_preprocess(resize_lanczos(test::golden_source(root, c.attr_string("source")), width, height));
    const Tensor want = c.read_tensor("pixels");  // [3, h, w]
    ASSERT_EQ(want.shape(), (Shape{3, height, width})) << name;
    ASSERT_EQ(got.height, height);
    ASSERT_EQ(got.width, width);
    ASSERT_EQ(got.pixels.size(), static_cast<size_t>(want.numel())) << name;
    EXPECT_TRUE(same_floats(got.pixels.data(), want.data<float>(), want.numel())) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

TEST(EditInputs, EditAndEditPlusImagesEqualThePipelines) {
  h5::File f = test::image_golden();
  const h5::Group root = f.root(), cases = root.open_group("edit_inputs");
  int checked = 0;
  for (const std::string& name : cases.members()) {
    const h5::Group c = cases.open_group(name);
    const RgbImage source = test::golden_source(root, name);

    const EditConditionImage edit = edit_condition_image(source);
    const std::vector<int64_t> edit_size = c.attr_ints("edit_size");  // (width, height)
    EXPECT_EQ(edit.vl_image.width, edit_size[0]) << name;
    EXPECT_EQ(edit.vl_image.height, edit_size[1]) << name;
    EXPECT_EQ(test::sha256_of(edit.vl_image), c.attr_string("edit_vl_image_sha256")) << name;
    EXPECT_EQ(test::sha256_of(vae_preprocess(edit.vae_image).pixels), c.attr_string("edit_vae_pixels_sha256")) << name;

    const EditConditionImage plus = edit_plus_condition_image(source);
    const std::vector<int64_t> vl_size = c.attr_ints("plus_vl_size"), vae_size = c.attr_ints("plus_vae_size");
    EXPECT_EQ(plus.vl_image.width, vl_size[0]) << name;
    EXPECT_EQ(plus.vl_image.height, vl_size[1]) << name;
    EXPECT_EQ(plus.vae_image.width, vae_size[0]) << name;
    EXPECT_EQ(plus.vae_image.height, vae_size[1]) << name;
    EXPECT_EQ(test::sha256_of(plus.vl_image), c.attr_string("plus_vl_image_sha256")) << name;
    EXPECT_EQ(test::sha256_of(vae_preprocess(plus.vae_image).pixels), c.attr_string("plus_vae_pixels_sha256")) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

TEST(EditInputs, AnAspectThatRoundsASideToZeroIsAnInputError) {
  // 1x2000 at 384² px: width sqrt(147456 / 2000) = 8.6 rounds to 0 multiples of 32.
  RgbImage needle{1, 2000, std::vector<uint8_t>(2000 * 3, 123)};
  const std::string message = test::input_error_of([&] { edit_plus_condition_image(needle); });
  EXPECT_NE(message.find("1x2000"), std::string::npos) << message;
  EXPECT_NE(message.find("rounds to 0x"), std::string::npos) << message;
}
