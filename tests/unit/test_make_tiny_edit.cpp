// `make-tiny --model qwen-image-edit*`: a file of the structure convert writes of an Edit folder
// (the vision tower in the text encoder, the VAE encoder, the processor component, the Edit
// template), which ImageModel opens as its family and `generate` runs on a PNG input image.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "core/sha256.h"
#include "io/png_io.h"
#include "io/weight_store.h"
#include "model/qwen2vl_image_processor.h"
#include "model/qwen_image_edit_constants.h"
#include "model/qwen_vl_vision.h"
#include "model/vae.h"
#include "model/vae_encoder.h"
#include "pipeline/image_model.h"
#include "test_util.h"

using namespace ditbatch;
using test::TempDir;

namespace {

struct TinyEdit {
  std::string model, pipeline_class, family, prompt_template;
  bool plus = false;  // Edit-Plus: several input images
  bool two_images = false, true_cfg = false;
};

const std::vector<TinyEdit> kTinyEdits = {
    {"qwen-image-edit", "QwenImageEditPipeline", "Qwen-Image-Edit", kQwenImageEditPromptTemplate, false, false, true},
    {"qwen-image-edit-2509", "QwenImageEditPlusPipeline", "Qwen-Image-Edit-2509", kQwenImageEditPlusPromptTemplate, true, true, false},
    {"qwen-image-edit-2511", "QwenImageEditPlusPipeline", "Qwen-Image-Edit-2511", kQwenImageEditPlusPromptTemplate, true, false, true},
};

// Every tensor of `specs` in the component, at its shape.
void expect_tensors(const Component& component, const std::vector<WeightSpec>& specs) {
  ASSERT_FALSE(specs.empty());
  for (const WeightSpec& spec : specs) {
    ASSERT_TRUE(component.has_tensor(spec.name)) << spec.name;
    EXPECT_EQ(component.tensor_info(spec.name).shape, spec.shape) << spec.name;
  }
}

// A small RGB picture with a gradient (any content does: the weights are random).
void write_input_png(const std::string& path, int64_t width, int64_t height) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width * height * 3));
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 7 % 251);
  write_png_atomic(path, rgb.data(), width, height, 3, {});
}

class MakeTinyEdit : public ::testing::TestWithParam<TinyEdit> {};

}  // namespace

TEST_P(MakeTinyEdit, WritesWhatConvertWritesAndGenerateRunsOnAnInputImage) {
  const TinyEdit& e = GetParam();
  TempDir dir;
  const std::string weights_path = dir / "tiny-edit.h5";
  auto r = test::run(test::exe() + " make-tiny --model " + e.model + " --out " + weights_path);
  ASSERT_EQ(r.status, 0) << r.output;

  const WeightStore weights = WeightStore::open(weights_path);
  EXPECT_EQ(weights.root_string("pipeline_class"), e.pipeline_class);
  EXPECT_EQ(weights.root_string("prompt_template"), e.prompt_template);
  EXPECT_EQ(weights.root_int("prompt_template_encode_start_idx"), 64);
  const Component text = weights.component("text_encoder"), vae = weights.component("vae");
  const VisionConfig vision = VisionConfig::from(text.config());
  EXPECT_EQ(vision.out_hidden_size, 64);  // the tiny language model's width
  expect_tensors(text, QwenVisionTower::weight_specs(vision));
  expect_tensors(vae, VaeEncoder::weight_specs(VaeConfig::from(vae.config())));
  // Qwen2.5-VL's published preprocessor_config.json values.
  const Qwen2VLImageProcessorConfig processor = Qwen2VLImageProcessorConfig::parse(
      weights.component("processor").group().attr_string("config_json"), "processor");
  EXPECT_EQ(processor.min_pixels, 3136);
  EXPECT_EQ(processor.max_pixels, 12845056);
  EXPECT_EQ(processor.patch_size, 14);
  EXPECT_EQ(processor.temporal_patch_size, 2);
  EXPECT_EQ(processor.merge_size, 2);
  EXPECT_FLOAT_EQ(processor.image_mean[0], 0.48145466f);
  EXPECT_FLOAT_EQ(processor.image_std[2], 0.27577711f);

  const std::unique_ptr<ImageModel> model = ImageModel::open(weights);
  EXPECT_EQ(model->family(), e.family);
  EXPECT_EQ(model->min_input_images(), 1);
  if (e.plus)
    EXPECT_GT(model->max_input_images(), 1);
  else
    EXPECT_EQ(model->max_input_images(), 1);

  // 2 steps at 64x48: two images on 2509, true CFG on Edit and 2511 (each input is encoded at
  // ~1024x1024, whatever its size: one pass each keeps the test short).
  write_input_png(dir / "a.png", 40, 30);
  write_input_png(dir / "b.png", 24, 36);
  const nlohmann::json images = e.two_images ? nlohmann::json{"a.png", "b.png"} : nlohmann::json("a.png");
  const nlohmann::json line = {{"prompt", "make the sky green"}, {"image", images}, {"width", 64}, {"height", 48},
                               {"steps", 2}, {"cfg", e.true_cfg ? 4.0 : 1.0}, {"name", "edit"}};
  test::write_text(dir / "p.jsonl", line.dump() + "\n");
  const std::string out = dir / "out";
  r = test::run(fmt::format("{} generate --weights {} --prompts {} --out {}", test::exe(), weights_path,
                            dir / "p.jsonl", out));
  ASSERT_EQ(r.status, 0) << r.output;
  const PngImage png = read_png(out + "/edit.png");
  EXPECT_EQ(png.width, 64);
  EXPECT_EQ(png.height, 48);
  const std::map<std::string, std::string> text_chunks(png.text.begin(), png.text.end());
  ASSERT_TRUE(text_chunks.count("input_images"));
  const nlohmann::json recorded = nlohmann::json::parse(text_chunks.at("input_images"));
  ASSERT_EQ(recorded.size(), e.two_images ? 2u : 1u);
  EXPECT_EQ(recorded[0]["path"], "a.png");
  EXPECT_EQ(recorded[0]["sha256"], sha256_hex(test::read_text(dir / "a.png")));
}

INSTANTIATE_TEST_SUITE_P(Families, MakeTinyEdit, ::testing::ValuesIn(kTinyEdits),
                         [](const auto& info) {
                           std::string name = info.param.model;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });
