// The Qwen-Image transformer on the CPU backend against diffusers, block by block (tiny model,
// even and odd grids, batch 2 with a padded text mask and two timesteps).
#include <gtest/gtest.h>

#include "cpu/cpu_backend.h"
#include "golden.h"
#include "io/h5.h"
#include "model/transformer.h"

using namespace ditbatch;
using test::batch_row;
using test::nchw_to_nhwc;
using test::squeeze0;

namespace {

constexpr double kNmseBound = 1e-10;  // fp32 rounding only

// The tiny golden transformer on the CPU and one case of diffusers' outputs.
struct GoldenCase {
  CpuBackend be;
  WeightStore store = WeightStore::open(test::golden_weights());
  QwenImageTransformer model{be, store.component("transformer")};
  h5::File file = h5::File::open_read(test::golden("transformer.h5"));
  h5::Group g;
  int64_t h = 0, w = 0;
  explicit GoldenCase(const std::string& name)
      : g(file.root().open_group("cases").open_group(name)), h(g.attr_int("h")), w(g.attr_int("w")) {}
};

void check_case(const std::string& name) {
  SCOPED_TRACE("case " + name);
  GoldenCase gc(name);
  QwenImageTransformer& model = gc.model;
  h5::Group& g = gc.g;
  const int64_t h = gc.h, w = gc.w;
  Tensor latents = g.read_tensor("hidden_states"), text = g.read_tensor("encoder_hidden_states");
  Tensor timestep = g.read_tensor("timestep"), temb = g.read_tensor("temb"), output = g.read_tensor("output");
  const bool has_mask = g.has_dataset("encoder_hidden_states_mask");
  Tensor mask = has_mask ? g.read_tensor("encoder_hidden_states_mask") : Tensor();
  const int64_t B = latents.dim(0), L = text.dim(1);
  for (int64_t b = 0; b < B; ++b) {
    SCOPED_TRACE("batch row " + std::to_string(b));
    int64_t valid = L;
    if (has_mask) {
      valid = 0;
      for (int64_t j = 0; j < L; ++j) {
        const int64_t m = mask.data<int64_t>()[b * L + j];
        if (m) {
          ASSERT_EQ(valid, j) << "the golden's valid tokens must be a prefix";
        }
        valid += m != 0;
      }
    }
    TimestepConditioning cond = model.condition(timestep.data<float>()[b]);
    EXPECT_LE(test::nmse(cond.temb, batch_row(temb, b)), kNmseBound);
    int64_t blocks_seen = 0;
    Tensor out = model.forward(
        batch_row(latents, b), batch_row(text, b), valid, h, w, cond,
        [&](int64_t i, const Tensor& txt, const Tensor& img) {
          const std::string prefix = fmt::format("block_{}_", i);
          EXPECT_LE(test::nmse(img, batch_row(g.read_tensor(prefix + "img"), b)), kNmseBound) << prefix << "img";
          EXPECT_LE(test::nmse(txt, batch_row(g.read_tensor(prefix + "txt"), b)), kNmseBound) << prefix << "txt";
          ++blocks_seen;
        });
    EXPECT_EQ(blocks_seen, 2);
    Tensor expected = batch_row(output, b);
    EXPECT_LE(test::nmse(out, expected), kNmseBound);
    EXPECT_LT(test::max_abs_diff(out, expected), 1e-4);
  }
}

// True CFG's batch (forward_cfg) against the two forward() calls checked above: the golden's
// padded text (row 1) as cond; its other text (row 0) cut by one token, the last two of the
// rest taken as padding, as negative: two different lengths, both padded.
void check_cfg_batch(const std::string& name) {
  SCOPED_TRACE("case " + name);
  GoldenCase gc(name);
  Tensor latents = batch_row(gc.g.read_tensor("hidden_states"), 1), text = gc.g.read_tensor("encoder_hidden_states");
  Tensor mask = gc.g.read_tensor("encoder_hidden_states_mask");
  const int64_t L = text.dim(1);
  auto valid_of = [&](int64_t b) {
    int64_t n = 0;
    for (int64_t j = 0; j < L; ++j) n += mask.data<int64_t>()[b * L + j] != 0;
    return n;
  };
  const int64_t valid0 = valid_of(1), valid1 = L - 3;
  ASSERT_LT(valid0, L) << "row 1 of the golden should be padded";
  const Tensor text0 = batch_row(text, 1), text1 = batch_row(text, 0).slice0(0, L - 1).clone();
  TimestepConditioning cond = gc.model.condition(gc.g.read_tensor("timestep").data<float>()[1]);
  const Tensor cond_v = gc.model.forward(latents, text0, valid0, gc.h, gc.w, cond);
  const Tensor neg_v = gc.model.forward(latents, text1, valid1, gc.h, gc.w, cond);
  const auto [cond_b, neg_b] = gc.model.forward_cfg(latents, text0, valid0, text1, valid1, gc.h, gc.w, cond);
  ASSERT_EQ(cond_b.shape(), cond_v.shape());
  ASSERT_EQ(neg_b.shape(), neg_v.shape());
  ASSERT_GT(test::nmse(cond_v, neg_v), 1e-4) << "the two texts should give different velocities";
  EXPECT_LE(test::nmse(cond_b, cond_v), 1e-12);
  EXPECT_LE(test::nmse(neg_b, neg_v), 1e-12);
}

}  // namespace

TEST(TransformerGolden, CfgBatchMatchesTwoForwardsEvenGrid) { check_cfg_batch("even"); }
TEST(TransformerGolden, CfgBatchMatchesTwoForwardsOddGrid) { check_cfg_batch("odd"); }
TEST(TransformerGolden, EvenGridWithPaddedMask) { check_case("even"); }
TEST(TransformerGolden, OddGridWithPaddedMask) { check_case("odd"); }
TEST(TransformerGolden, NoMask) { check_case("nomask"); }

TEST(TransformerGolden, FlopCountOfTheRealModel) {
  // 1024^2 with 20 text tokens: 60 blocks of 2*T*(4D^2 + 2DF) + 4*T^2*D, plus the in/out layers.
  TransformerConfig real;
  const double T = 4096 + 20, D = 3072, F = 12288;
  const double expected = 60 * (2 * T * (4 * D * D + 2 * D * F) + 4 * T * T * D) +
                          2 * (4096 * 64 * D + 20 * 3584 * D + 4096 * D * 64);
  EXPECT_DOUBLE_EQ(QwenImageTransformer::forward_flops(real, 4096, 20), expected);
  // Anchors from shapes alone: one image MLP GEMM is 2*4096*3072*12288 = 309 GFLOP, a forward
  // at 1024^2 is ~68.4 TFLOP (55.6 image + 0.3 text GEMMs + 12.5 attention).
  EXPECT_NEAR(2.0 * 4096 * D * F / 1e9, 309.2, 0.1);
  EXPECT_NEAR(expected / 1e12, 68.43, 0.01);
}
