// Integrity of tests/data/golden: every file holds what the model tests read (names, shapes,
// dtypes), so a broken regeneration fails here, loudly, before any model test is puzzled.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/h5.h"
#include "io/safetensors.h"
#include "test_util.h"

using namespace ditbatch;

namespace {

void expect_dataset(const h5::Group& g, const std::string& name, DType dtype, const Shape& shape) {
  ASSERT_TRUE(g.has_dataset(name)) << g.where(name);
  h5::DatasetInfo info = g.dataset_info(name);
  EXPECT_EQ(info.dtype, dtype) << g.where(name);
  if (!shape.empty()) {
    EXPECT_EQ(info.shape, shape) << g.where(name);
  }
}

void expect_versions(const h5::Group& root) {
  for (const char* attr : {"torch_version", "diffusers_version", "transformers_version", "numpy_version",
                           "tokenizers_version", "cpu_capability"})
    EXPECT_TRUE(root.has_attr(attr)) << root.where() << " lacks " << attr;
  EXPECT_EQ(root.attr_string("diffusers_version"), "0.42.1");
}

}  // namespace

TEST(GoldenFiles, TotalSizeWithinBudget) {
  uintmax_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(test::golden("")))
    if (e.is_regular_file()) total += e.file_size();
  EXPECT_LT(total, 32u * 1000 * 1000);  // three families' goldens, the Edit family's image side included
}

TEST(GoldenFiles, TokenizerScheduleNoise) {
  {
    h5::File f = h5::File::open_read(test::golden("tokenizer.h5"));
    expect_versions(f.root());
    h5::Group cases = f.root().open_group("cases");
    EXPECT_GE(cases.members().size(), 150u);
    for (const auto& name : cases.members()) {
      h5::Group c = cases.open_group(name);
      expect_dataset(c, "text", DType::U8, {});
      expect_dataset(c, "ids", DType::I64, {});
      expect_dataset(c, "template_ids", DType::I64, {});
      expect_dataset(c, "template_ids_dropped", DType::I64, {c.dataset_info("template_ids").shape[0] - 34});
    }
  }
  {
    h5::File f = h5::File::open_read(test::golden("scheduler.h5"));
    expect_versions(f.root());
    for (int64_t steps : f.root().attr_ints("steps"))
      for (int64_t seq : f.root().attr_ints("seq_lens")) {
        h5::Group g = f.root().open_group(fmt::format("steps_{}", steps)).open_group(fmt::format("seq_{}", seq));
        expect_dataset(g, "sigmas", DType::F32, {steps + 1});
        expect_dataset(g, "timesteps", DType::F32, {steps});
      }
  }
  {
    h5::File f = h5::File::open_read(test::golden("noise.h5"));
    expect_versions(f.root());
    h5::Group cases = f.root().open_group("cases");
    for (const auto& name : cases.members()) {
      h5::Group c = cases.open_group(name);
      Tensor shape = c.read_tensor("shape");
      expect_dataset(c, "noise", DType::F32, Shape(shape.data<int64_t>(), shape.data<int64_t>() + shape.numel()));
      EXPECT_TRUE(c.has_attr("seed"));
    }
  }
}

TEST(GoldenFiles, ModelStages) {
  {
    h5::File f = h5::File::open_read(test::golden("transformer.h5"));
    expect_versions(f.root());
    for (const char* name : {"even", "odd", "nomask"}) {
      h5::Group c = f.root().open_group("cases").open_group(name);
      const int64_t S = c.attr_int("h") * c.attr_int("w");
      const int64_t B = c.dataset_info("hidden_states").shape[0], L = c.dataset_info("encoder_hidden_states").shape[1];
      expect_dataset(c, "hidden_states", DType::F32, {B, S, 64});
      expect_dataset(c, "encoder_hidden_states", DType::F32, {B, L, 64});
      expect_dataset(c, "timestep", DType::F32, {B});
      expect_dataset(c, "temb", DType::F32, {B, 64});
      for (int i = 0; i < 2; ++i) {
        expect_dataset(c, fmt::format("block_{}_txt", i), DType::F32, {B, L, 64});
        expect_dataset(c, fmt::format("block_{}_img", i), DType::F32, {B, S, 64});
      }
      expect_dataset(c, "output", DType::F32, {B, S, 64});
    }
  }
  {
    h5::File f = h5::File::open_read(test::golden("vae.h5"));
    expect_versions(f.root());
    h5::Group cases = f.root().open_group("cases");
    EXPECT_EQ(cases.members().size(), 4u);
    for (const auto& name : cases.members()) {
      h5::Group c = cases.open_group(name);
      const int64_t h = c.attr_int("h"), w = c.attr_int("w");
      expect_dataset(c, "z", DType::F32, {1, 16, 1, h, w});
      expect_dataset(c, "decoded", DType::F32, {1, 3, 1, 8 * h, 8 * w});
    }
    h5::Group real = f.root().open_group("real_up_block0");
    expect_dataset(real, "input", DType::F32, {1, 384, 1, 4, 4});
    expect_dataset(real, "output", DType::F32, {1, 192, 1, 8, 8});
    EXPECT_EQ(real.open_group("params").members().size(), 22u);
  }
  {
    h5::File f = h5::File::open_read(test::golden("text_encoder.h5"));
    expect_versions(f.root());
    h5::Group prompts = f.root().open_group("prompts");
    for (const auto& name : prompts.members()) {
      h5::Group p = prompts.open_group(name);
      const int64_t L = p.dataset_info("input_ids").shape[0];
      expect_dataset(p, "hidden_states", DType::F32, {3, L, 64});
      expect_dataset(p, "prompt_embeds", DType::F32, {L - 34, 64});
    }
    h5::Group batch = f.root().open_group("batch");
    expect_dataset(batch, "prompt_embeds", DType::F32, {4, 39, 64});
    expect_dataset(batch, "prompt_embeds_mask", DType::I64, {4, 39});
  }
  {
    h5::File f = h5::File::open_read(test::golden("pipeline.h5"));
    expect_versions(f.root());
    h5::Group cases = f.root().open_group("cases");
    EXPECT_EQ(cases.members().size(), 12u);
    for (const auto& name : cases.members()) {
      h5::Group c = cases.open_group(name);
      const int64_t H = c.attr_int("height"), W = c.attr_int("width"), S = (H / 16) * (W / 16);
      const int64_t steps = c.attr_int("steps");
      for (const char* attr : {"prompt", "negative_prompt", "true_cfg_scale", "seed"}) EXPECT_TRUE(c.has_attr(attr));
      expect_dataset(c, "noise", DType::F32, {1, S, 64});
      expect_dataset(c, "sigmas", DType::F32, {steps + 1});
      expect_dataset(c, "final_latents", DType::F32, {1, S, 64});
      expect_dataset(c, "image_float", DType::F32, {H, W, 3});
      expect_dataset(c, "image_uint8", DType::U8, {H, W, 3});
      for (int64_t i = 0; i < steps; ++i) expect_dataset(c, fmt::format("latents_step_{}", i), DType::F32, {1, S, 64});
    }
  }
}

TEST(GoldenFiles, ImageProcessor) {
  h5::File f = h5::File::open_read(test::golden("image_processor.h5"));
  const h5::Group root = f.root();
  expect_versions(root);
  EXPECT_EQ(root.attr_string("pillow_version"), "13.0.0");  // Pillow 13's pass order is in the resizes
  const h5::Group resize = root.open_group("resize");
  EXPECT_EQ(resize.members().size(), 68u);
  for (const auto& name : resize.members()) {
    const h5::Group c = resize.open_group(name);
    expect_dataset(c, "image", DType::U8, {c.attr_int("height"), c.attr_int("width"), 3});
    EXPECT_TRUE(root.open_group("sources").has_dataset(c.attr_string("source"))) << name;
  }
  expect_dataset(root.open_group("calculate_dimensions"), "width", DType::I64, {});
  expect_dataset(root.open_group("smart_resize"), "resized", DType::I64, {});
  for (const char* config : {"class_default", "qwen_image_edit"}) {
    const h5::Group g = root.open_group("qwen2vl").open_group(config);
    EXPECT_EQ(g.members().size(), 6u) << config;
    for (const auto& name : g.members()) expect_dataset(g.open_group(name), "image_grid_thw", DType::I64, {1, 3});
  }
  EXPECT_EQ(root.open_group("vae_preprocess").members().size(), 2u);
  EXPECT_EQ(root.open_group("edit_inputs").members().size(), 3u);
}

TEST(GoldenFiles, TinyPipelineFolderIsComplete) {
  const std::string root = test::golden("tiny-pipeline");
  for (const char* f : {"model_index.json", "scheduler/scheduler_config.json", "transformer/config.json",
                        "vae/config.json", "text_encoder/config.json", "tokenizer/vocab.json", "tokenizer/merges.txt"})
    EXPECT_TRUE(std::filesystem::exists(root + "/" + f)) << f;
  for (const char* dir : {"transformer", "vae", "text_encoder"})
    EXPECT_GT(SafetensorsSet::open_dir(root + "/" + dir).items().size(), 10u) << dir;
}
