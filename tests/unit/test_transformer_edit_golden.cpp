// The Qwen-Image transformer with condition images (Qwen-Image-Edit, qwen-image-edit.md §9) on the
// CPU backend against diffusers: the image stream [noise; conditions] with its per-image RoPE
// frames and the text placed after the largest grid, zero_cond_t off and on (Edit-2511), one
// sample and true CFG's batch.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "golden.h"
#include "io/config.h"
#include "io/h5.h"
#include "model/transformer.h"

using namespace ditbatch;
using test::batch_row;

namespace {

constexpr double kNmseBound = 1e-10;  // fp32 rounding only, as the text-to-image golden

const char* const kCases[] = {"one_condition", "two_conditions", "larger_condition", "cfg_batch"};

// The tiny golden transformer, with zero_cond_t set as Edit-2511's config sets it.
struct EditModel {
  CpuBackend be;
  WeightStore store = WeightStore::open(test::golden_weights());
  Component component = store.component("transformer");
  TransformerConfig config;
  QwenImageTransformer model;
  explicit EditModel(bool zero_cond_t)
      : config(with_zero_cond_t(TransformerConfig::from(component.config()), zero_cond_t)),
        model(be, config, ComponentLoader(component)) {}
  static TransformerConfig with_zero_cond_t(TransformerConfig c, bool on) {
    c.zero_cond_t = on;
    return c;
  }
};

// One case of transformer_edit.h5: its inputs, and diffusers' outputs in one mode.
struct EditCase {
  h5::File file = h5::File::open_read(test::golden("transformer_edit.h5"));
  h5::Group g, mode;
  std::vector<PackedGrid> img_shapes;
  int64_t S0 = 0, S = 0, L = 0;
  Tensor latents, text, timestep;
  std::vector<int64_t> valid;  // per batch row
  EditCase(const std::string& name, bool zero_cond_t)
      : g(file.root().open_group("cases").open_group(name)),
        mode(g.open_group(zero_cond_t ? "zero_cond_t" : "plain")) {
    const Tensor shapes = g.read_tensor("img_shapes");  // [images, 2]
    for (int64_t k = 0; k < shapes.dim(0); ++k)
      img_shapes.push_back({shapes.data<int64_t>()[2 * k], shapes.data<int64_t>()[2 * k + 1]});
    for (const PackedGrid& grid : img_shapes) S += grid.tokens();
    S0 = img_shapes[0].tokens();
    latents = g.read_tensor("hidden_states");
    text = g.read_tensor("encoder_hidden_states");
    timestep = g.read_tensor("timestep");
    L = text.dim(1);
    const bool has_mask = g.has_dataset("encoder_hidden_states_mask");
    const Tensor mask = has_mask ? g.read_tensor("encoder_hidden_states_mask") : Tensor();
    for (int64_t b = 0; b < latents.dim(0); ++b) {
      int64_t n = 0;
      for (int64_t j = 0; j < L; ++j) {
        const bool real = !has_mask || mask.data<int64_t>()[b * L + j] != 0;
        if (real) {
          EXPECT_EQ(n, j) << "the golden's valid tokens must be a prefix";
        }
        n += real;
      }
      valid.push_back(n);
    }
  }
  int64_t batch() const { return latents.dim(0); }
};

// forward() of every batch row: each block's text and whole image stream (the condition rows
// too), and the kept velocity v[:, :S0].
void check_forward(const std::string& name, bool zero_cond_t) {
  SCOPED_TRACE(fmt::format("case {}, zero_cond_t {}", name, zero_cond_t));
  EditModel m(zero_cond_t);
  EditCase c(name, zero_cond_t);
  ASSERT_GT(c.S, c.S0) << "every case has condition images";
  const Tensor output = c.mode.read_tensor("output"), output_full = c.mode.read_tensor("output_full");
  ASSERT_EQ(output.dim(1), c.S0);
  EXPECT_LE(test::nmse(batch_row(output_full, 0).slice0(0, c.S0), batch_row(output, 0)), 0.0);
  for (int64_t b = 0; b < c.batch(); ++b) {
    SCOPED_TRACE("batch row " + std::to_string(b));
    const TimestepConditioning cond = m.model.condition(c.timestep.data<float>()[b]);
    ASSERT_EQ(cond.img_mod_zero_t.size(), zero_cond_t ? static_cast<size_t>(m.config.num_layers) : 0u);
    int64_t blocks_seen = 0;
    const Tensor v = m.model.forward(
        batch_row(c.latents, b), batch_row(c.text, b), c.valid[static_cast<size_t>(b)], c.img_shapes, cond,
        [&](int64_t i, const Tensor& txt, const Tensor& img) {
          const std::string prefix = fmt::format("block_{}_", i);
          EXPECT_EQ(img.dim(0), c.S) << "the hook sees the whole image stream";
          EXPECT_LE(test::nmse(img, batch_row(c.mode.read_tensor(prefix + "img"), b)), kNmseBound) << prefix << "img";
          EXPECT_LE(test::nmse(txt, batch_row(c.mode.read_tensor(prefix + "txt"), b)), kNmseBound) << prefix << "txt";
          ++blocks_seen;
        });
    EXPECT_EQ(blocks_seen, m.config.num_layers);
    ASSERT_EQ(v.shape(), (Shape{c.S0, m.config.in_channels}));
    const Tensor expected = batch_row(output, b);
    EXPECT_LE(test::nmse(v, expected), kNmseBound);
    EXPECT_LT(test::max_abs_diff(v, expected), 1e-4);
  }
}

// forward_cfg of the CFG case's two texts over the same latents: diffusers' batch of two, and
// the two forward() calls.
void check_cfg(bool zero_cond_t) {
  SCOPED_TRACE(fmt::format("zero_cond_t {}", zero_cond_t));
  EditModel m(zero_cond_t);
  EditCase c("cfg_batch", zero_cond_t);
  ASSERT_EQ(c.batch(), 2);
  ASSERT_NE(c.valid[0], c.valid[1]);
  const Tensor latents = batch_row(c.latents, 0), text0 = batch_row(c.text, 0), text1 = batch_row(c.text, 1);
  EXPECT_LE(test::nmse(batch_row(c.latents, 1), latents), 0.0) << "CFG's two samples share the latents";
  const TimestepConditioning cond = m.model.condition(c.timestep.data<float>()[0]);
  const auto [cond_b, neg_b] =
      m.model.forward_cfg(latents, text0, c.valid[0], text1, c.valid[1], c.img_shapes, cond);
  const Tensor cond_v = m.model.forward(latents, text0, c.valid[0], c.img_shapes, cond);
  const Tensor neg_v = m.model.forward(latents, text1, c.valid[1], c.img_shapes, cond);
  ASSERT_EQ(cond_b.shape(), (Shape{c.S0, m.config.in_channels}));
  ASSERT_EQ(neg_b.shape(), cond_b.shape());
  const Tensor output = c.mode.read_tensor("output");
  EXPECT_LE(test::nmse(cond_b, batch_row(output, 0)), kNmseBound);
  EXPECT_LE(test::nmse(neg_b, batch_row(output, 1)), kNmseBound);
  EXPECT_GT(test::nmse(cond_v, neg_v), 1e-4) << "the two texts should give different velocities";
  EXPECT_LE(test::nmse(cond_b, cond_v), 1e-12);
  EXPECT_LE(test::nmse(neg_b, neg_v), 1e-12);
}

}  // namespace

TEST(TransformerEditGolden, OneConditionOfAnotherSize) {
  check_forward("one_condition", false);
  check_forward("one_condition", true);
}
TEST(TransformerEditGolden, TwoConditionsWithPaddedText) {
  check_forward("two_conditions", false);
  check_forward("two_conditions", true);
}
TEST(TransformerEditGolden, TextStartsAfterTheLargestImage) {
  check_forward("larger_condition", false);
  check_forward("larger_condition", true);
}
TEST(TransformerEditGolden, CfgBatchRowsAsForward) {
  check_forward("cfg_batch", false);
  check_forward("cfg_batch", true);
}
TEST(TransformerEditGolden, CfgBatchMatchesDiffusersAndTwoForwards) {
  check_cfg(false);
  check_cfg(true);
}

// zero_cond_t picks per row: without condition images every row is the noise latents' and reads
// the real t, so the text-to-image golden holds with it on, bit for bit as with it off.
TEST(TransformerEditGolden, ZeroCondTWithoutConditionsIsTextToImage) {
  EditModel plain(false), zero(true);
  h5::File f = h5::File::open_read(test::golden("transformer.h5"));
  h5::Group g = f.root().open_group("cases").open_group("nomask");
  const int64_t h = g.attr_int("h"), w = g.attr_int("w");
  const Tensor latents = batch_row(g.read_tensor("hidden_states"), 0), text = batch_row(g.read_tensor("encoder_hidden_states"), 0);
  const float tt = g.read_tensor("timestep").data<float>()[0];
  const Tensor want = plain.model.forward(latents, text, text.dim(0), h, w, plain.model.condition(tt));
  const Tensor got = zero.model.forward(latents, text, text.dim(0), h, w, zero.model.condition(tt));
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0);
  EXPECT_LE(test::nmse(got, batch_row(g.read_tensor("output"), 0)), kNmseBound);
}

// Edit-2511's config key is read into the config; the other variants stay refused.
TEST(TransformerEditGolden, ConfigAcceptsZeroCondT) {
  EditModel m(false);
  nlohmann::json json = m.component.config().json();
  EXPECT_FALSE(TransformerConfig::from(Config(json, "test")).zero_cond_t);
  json["zero_cond_t"] = true;
  EXPECT_TRUE(TransformerConfig::from(Config(json, "test")).zero_cond_t);
  for (const char* key : {"use_additional_t_cond", "use_layer3d_rope"}) {
    nlohmann::json variant = json;
    variant[key] = true;
    EXPECT_NE(test::input_error_of([&] { TransformerConfig::from(Config(variant, "test")); }).find(key),
              std::string::npos)
        << key;
  }
}

// zero_cond_t's t = 0 vectors computed while loading (modulation weights released) have the bits
// of a loaded model's, differ from the real t's, are counted once in conditioning_bytes, and give
// diffusers' output.
TEST(TransformerEditGolden, ZeroCondTConditioningAtLoad) {
  EditModel loaded(true);
  const TransformerConfig& config = loaded.config;
  ComponentLoader loader(loaded.component);
  EditCase c("two_conditions", true);
  const float tt = c.timestep.data<float>()[0];
  QwenImageTransformer at_load(loaded.be, config, loader, std::vector<float>{tt, 0.25f});
  ASSERT_FALSE(at_load.conditioning_weights_resident());
  const TimestepConditioning want = loaded.model.condition(tt), got = at_load.condition(tt);
  ASSERT_EQ(got.img_mod_zero_t.size(), static_cast<size_t>(config.num_layers));
  ASSERT_EQ(want.img_mod_zero_t.size(), got.img_mod_zero_t.size());
  for (size_t i = 0; i < got.img_mod_zero_t.size(); ++i) {
    const Tensor &a = got.img_mod_zero_t[i], &b = want.img_mod_zero_t[i];
    ASSERT_EQ(a.shape(), (Shape{6, config.inner_dim()}));
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << "block " << i;
    EXPECT_GT(test::nmse(a, got.img_mod[i]), 1e-6) << "block " << i << ": t = 0 should differ from t = " << tt;
  }
  const Tensor v = at_load.forward(batch_row(c.latents, 0), batch_row(c.text, 0), c.valid[0], c.img_shapes, got);
  EXPECT_LE(test::nmse(v, batch_row(c.mode.read_tensor("output"), 0)), kNmseBound);

  TransformerConfig plain = config;
  plain.zero_cond_t = false;
  const int64_t once = 6 * config.num_layers * config.inner_dim() * 4;  // img_mod at t = 0, f32
  EXPECT_EQ(QwenImageTransformer::conditioning_bytes(config, 2) - QwenImageTransformer::conditioning_bytes(plain, 2), once);
  EXPECT_EQ(QwenImageTransformer::conditioning_bytes(config, 7) - QwenImageTransformer::conditioning_bytes(plain, 7), once);
}

// A conditioning without the t = 0 vectors cannot drive a zero_cond_t model, nor latents that are
// not the image stream of img_shapes.
TEST(TransformerEditGolden, RefusesMismatchedConditioningAndLatents) {
  EditModel plain(false), zero(true);
  EditCase c("one_condition", true);
  const Tensor latents = batch_row(c.latents, 0), text = batch_row(c.text, 0);
  const float tt = c.timestep.data<float>()[0];
  EXPECT_THROW(zero.model.forward(latents, text, c.valid[0], c.img_shapes, plain.model.condition(tt)), Error);
  const std::vector<PackedGrid> target_only{c.img_shapes[0]};
  EXPECT_THROW(zero.model.forward(latents, text, c.valid[0], target_only, zero.model.condition(tt)), Error);
}
