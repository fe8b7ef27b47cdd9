// The Qwen2.5-VL vision tower (tiny) on the CPU backend against transformers: the window layout
// (window index, cu seqlens, the spec's worked example), the 2-D RoPE tables, every block's output
// and the merged output; and the tower a converted Edit folder loads.
#include <gtest/gtest.h>

#include <memory>

#include "cpu/cpu_backend.h"
#include "golden.h"
#include "io/h5.h"
#include "model/qwen_vl_vision.h"
#include "model/text_encoder.h"

using namespace ditbatch;

namespace {

constexpr double kNmseBound = 1e-10;

std::vector<int64_t> ints_of(const Tensor& t) {
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

std::vector<ImageGrid> grids_of(const Tensor& grid_thw) {
  std::vector<ImageGrid> grids;
  for (int64_t i = 0; i < grid_thw.dim(0); ++i) {
    const int64_t* g = grid_thw.data<int64_t>() + i * 3;
    grids.push_back({g[0], g[1], g[2]});
  }
  return grids;
}

// The golden tower's config as the text encoder's config.json holds it (its vision_config).
VisionConfig golden_vision_config(const h5::File& f) {
  const nlohmann::json vision = nlohmann::json::parse(f.root().attr_string("config_json"));
  return VisionConfig::from(Config(nlohmann::json{{"vision_config", vision}}, "vision.h5"));
}

std::vector<std::string> case_names(const h5::File& f) { return f.root().open_group("cases").members(); }

// The golden tower from the file's weights/ (every one of them bound, none left over).
std::unique_ptr<QwenVisionTower> golden_tower(Backend& be, const h5::File& f) {
  test::GoldenWeights weights(f.root().open_group("weights"), QwenVisionTower::kTensorPrefix);
  auto tower = std::make_unique<QwenVisionTower>(be, golden_vision_config(f), weights);
  EXPECT_EQ(weights.bound, QwenVisionTower::weight_specs(tower->config()).size());
  EXPECT_EQ(weights.bound, f.root().open_group("weights").members().size());
  return tower;
}

}  // namespace

TEST(VisionGolden, ConfigFromTheGoldenVisionConfig) {
  h5::File f = h5::File::open_read(test::golden("vision.h5"));
  const VisionConfig c = golden_vision_config(f);
  EXPECT_EQ(c.depth, 4);
  EXPECT_EQ(c.head_dim(), 16);
  EXPECT_EQ(c.window_cells(), 2);  // 16 px / merge 2 / patch 4
  EXPECT_EQ(c.fullatt_block_indexes, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(c.patch_dim(), 96);  // 3 channels x 2 frames x 4 x 4
  EXPECT_EQ(c.rope_theta, 10000.0);
}

// A vision_config the tower cannot follow is refused naming the key, before any weight is read.
TEST(VisionGolden, ConfigsTheTowerCannotFollowAreRefused) {
  h5::File f = h5::File::open_read(test::golden("vision.h5"));
  const nlohmann::json vision = nlohmann::json::parse(f.root().attr_string("config_json"));
  auto refusal = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json changed = vision;
    changed[key] = value;
    try {
      VisionConfig::from(Config(nlohmann::json{{"vision_config", changed}}, "config.json"));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal("fullatt_block_indexes", {1, 4}).find("fullatt_block_indexes holds 4, outside the 4 blocks"),
            std::string::npos);
  EXPECT_NE(refusal("num_heads", 16).find("a head_dim divisible by 4"), std::string::npos);  // 32 / 16 = 2
  EXPECT_NE(refusal("window_size", 4).find("window_size 4 is under one merged cell"), std::string::npos);
  EXPECT_NE(refusal("hidden_act", "gelu").find("hidden_act 'gelu'"), std::string::npos);
  EXPECT_EQ(refusal("depth", 4), "accepted");
  EXPECT_THROW(VisionConfig::from(Config(nlohmann::json::object(), "config.json")), InputError);  // no vision_config
}

// Spec qwen-image-edit.md §4's verified example: the real 112-px window on a grid of 8x12 patches.
TEST(VisionGolden, SpecWindowExample) {
  h5::File f = h5::File::open_read(test::golden("vision.h5"));
  VisionConfig c = golden_vision_config(f);
  h5::Group g = f.root().open_group("spec_window");
  c.window_size = g.attr_int("window_size");
  c.patch_size = g.attr_int("patch_size");
  const VisionWindows w = vision_windows(grids_of(g.read_tensor("grid_thw")), c);
  const std::vector<int64_t> spec_index = {0, 1, 2, 3, 6, 7, 8, 9, 12, 13, 14, 15, 18, 19, 20, 21, 4, 5, 10, 11, 16, 17, 22, 23};
  EXPECT_EQ(w.window_index, spec_index);
  EXPECT_EQ(w.cu_window_seqlens, (std::vector<int64_t>{0, 64, 96}));
  EXPECT_EQ(w.cu_seqlens, (std::vector<int64_t>{0, 96}));
  EXPECT_EQ(w.window_index, ints_of(g.read_tensor("window_index")));
  EXPECT_EQ(w.cu_window_seqlens, ints_of(g.read_tensor("cu_window_seqlens")));
}

TEST(VisionGolden, WindowIndexAndSeqlensOfEveryCase) {
  h5::File f = h5::File::open_read(test::golden("vision.h5"));
  const VisionConfig c = golden_vision_config(f);
  int checked = 0;
  for (const std::string& name : case_names(f)) {
    SCOPED_TRACE("case " + name);
    h5::Group g = f.root().open_group("cases").open_group(name);
    const VisionWindows w = vision_windows(grids_of(g.read_tensor("grid_thw")), c);
    EXPECT_EQ(w.window_index, ints_of(g.read_tensor("window_index")));
    EXPECT_EQ(w.cu_window_seqlens, ints_of(g.read_tensor("cu_window_seqlens")));
    EXPECT_EQ(w.cu_seqlens, ints_of(g.read_tensor("cu_seqlens")));
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

TEST(VisionGolden, RopeTablesInWindowOrder) {
  h5::File f = h5::File::open_read(test::golden("vision.h5"));
  const VisionConfig c = golden_vision_config(f);
  for (const std::string& name : case_names(f)) {
    SCOPED_TRACE("case " + name);
    h5::Group g = f.root().open_group("cases").open_group(name);
    const std::vector<ImageGrid> grids = grids_of(g.read_tensor("grid_thw"));
    const VisionRope rope = vision_rope(grids, vision_windows(grids, c), c);
    const Tensor cos = g.read_tensor("rope_cos"), sin = g.read_tensor("rope_sin");
    ASSERT_EQ(rope.cos.shape(), cos.shape());
    ASSERT_EQ(rope.sin.shape(), sin.shape());
    EXPECT_LE(test::max_abs_diff(rope.cos, cos), 1e-6);
    EXPECT_LE(test::max_abs_diff(rope.sin, sin), 1e-6);
  }
}

TEST(VisionGolden, EveryBlockAndTheMergedOutput) {
  CpuBackend be;
  h5::File f = h5::File::open_read(test::golden("vision.h5"));
  const std::unique_ptr<QwenVisionTower> tower = golden_tower(be, f);
  for (const std::string& name : case_names(f)) {
    SCOPED_TRACE("case " + name);
    h5::Group g = f.root().open_group("cases").open_group(name);
    const Tensor blocks = g.read_tensor("blocks");  // [depth, Np, hidden], window order
    const int64_t Np = blocks.dim(1), hidden = blocks.dim(2);
    int hooks = 0;
    Tensor out = tower->forward(g.read_tensor("pixel_values"), grids_of(g.read_tensor("grid_thw")),
                                [&](int64_t k, const Tensor& x) {
                                  EXPECT_LE(test::nmse(be.to_host_f32(x), blocks.slice0(k, k + 1).view({Np, hidden})),
                                            kNmseBound)
                                      << "block " << k;
                                  ++hooks;
                                });
    EXPECT_EQ(hooks, tower->config().depth);
    const Tensor expected = g.read_tensor("output");  // [Np / 4, out_hidden], raster order
    ASSERT_EQ(out.shape(), expected.shape());
    EXPECT_LE(test::nmse(be.to_host_f32(out), expected), kNmseBound);
  }
}

// A wrong pixel_values shape is the caller's input error, named with what the grids imply.
TEST(VisionGolden, PixelValuesOfAnotherShapeAreRefused) {
  CpuBackend be;
  h5::File f = h5::File::open_read(test::golden("vision.h5"));
  const std::unique_ptr<QwenVisionTower> tower = golden_tower(be, f);
  const int64_t patch_dim = tower->config().patch_dim();
  const Tensor pixels = test::random_tensor({96, patch_dim}, 3);
  EXPECT_NO_THROW(tower->forward(pixels, {{1, 8, 12}}));
  try {
    tower->forward(pixels, {{1, 8, 10}});
    FAIL() << "a grid of 80 patches took 96 rows";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("make host [80, 96]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tower->forward(test::random_tensor({30, patch_dim}, 4), {{1, 5, 6}}), InputError);  // 5: unmergeable
  EXPECT_THROW(tower->forward(pixels, {{2, 4, 12}}), InputError);  // video frames (t = 2) are not taken
}

// The tower of a converted Edit folder (its text encoder's visual.* and vision_config) against the
// tiny pipeline's own tower in transformers.
TEST(VisionGolden, TheTowerOfAConvertedEditFile) {
  CpuBackend be;
  WeightStore store = WeightStore::open(test::golden_edit_weights());
  QwenVisionTower tower(be, store.component("text_encoder"));
  EXPECT_EQ(tower.config().depth, 1);
  EXPECT_EQ(tower.config().hidden_size, 32);
  h5::File f = h5::File::open_read(test::golden("vision.h5"));
  h5::Group g = f.root().open_group("tiny_pipeline_tower");
  const Tensor out = tower.forward(g.read_tensor("pixel_values"), grids_of(g.read_tensor("grid_thw")));
  EXPECT_LE(test::nmse(be.to_host_f32(out), g.read_tensor("output")), kNmseBound);
  // The language model of the same component still loads beside the tower's tensors.
  EXPECT_EQ(QwenTextEncoder(be, store.component("text_encoder")).config().hidden_size, tower.config().out_hidden_size);
}
