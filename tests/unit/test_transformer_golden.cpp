// The Qwen-Image transformer on the CPU backend against diffusers, block by block (tiny model,
// even and odd grids, batch 2 with a padded text mask and two timesteps).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "golden.h"
#include "io/h5.h"
#include "model/transformer.h"
#include "model/pipeline_configs.h"

using namespace ditbatch;
using test::batch_row;
using test::nchw_to_nhwc;
using test::squeeze0;

namespace {

constexpr double kNmseBound = 1e-10;  // fp32 rounding only

// The CPU backend using attention's spare rows as far as the contract lets a backend
// (Backend::attention): each call's spare output rows are overwritten with NaN, as a padded
// cuDNN call may leave them, and the spare K and V rows it would read as masked padding must be
// finite, in memory that starts as NaN. The model must lay out its joint rows so that this
// changes nothing.
class SpareRowsOverwritten final : public CpuBackend {
 public:
  explicit SpareRowsOverwritten(int64_t spare) : spare_(spare) {}
  int64_t attention_spare_rows() const override { return spare_; }
  Tensor empty(const Shape& shape, DType dtype) override {
    Tensor t = CpuBackend::empty(shape, dtype);
    if (dtype == DType::F32) std::fill_n(t.data<float>(), t.numel(), std::nanf(""));
    return t;
  }
  using CpuBackend::attention;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal, const Tensor& out,
                 int64_t spare_rows) override {
    const size_t row = static_cast<size_t>(out.dim(1) * out.dim(2));
    for (const Tensor* kv : {&k, &v}) {
      const float* past = kv->data<float>() + kv->numel();
      nonfinite_padding += std::count_if(past, past + static_cast<size_t>(spare_rows) * row,
                                         [](float x) { return !std::isfinite(x); });
    }
    CpuBackend::attention(q, k, v, scale, causal, out, spare_rows);
    float* past = out.data<float>() + out.numel();
    std::fill(past, past + static_cast<size_t>(spare_rows) * row, std::nanf(""));
    overwritten_rows += spare_rows;
  }
  int64_t overwritten_rows = 0;
  int64_t nonfinite_padding = 0;  // non-finite values in the K / V rows a padded call would read

 private:
  int64_t spare_;
};

// The tiny golden transformer on a CPU backend and one case of diffusers' outputs.
template <typename CpuKind = CpuBackend>
struct GoldenCase {
  CpuKind be;
  WeightStore store = WeightStore::open(test::golden_weights());
  QwenImageTransformer model{be, store.component("transformer")};
  h5::File file = h5::File::open_read(test::golden("transformer.h5"));
  h5::Group g;
  int64_t h = 0, w = 0;
  template <typename... BackendArgs>
  explicit GoldenCase(const std::string& name, BackendArgs... args)
      : be(args...), g(file.root().open_group("cases").open_group(name)), h(g.attr_int("h")), w(g.attr_int("w")) {}
};

template <typename CpuKind = CpuBackend, typename... BackendArgs>
void check_case(const std::string& name, BackendArgs... args) {
  SCOPED_TRACE("case " + name);
  GoldenCase<CpuKind> gc(name, args...);
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
template <typename CpuKind = CpuBackend, typename... BackendArgs>
int64_t check_cfg_batch(const std::string& name, BackendArgs... args) {
  SCOPED_TRACE("case " + name);
  GoldenCase<CpuKind> gc(name, args...);
  Tensor latents = batch_row(gc.g.read_tensor("hidden_states"), 1), text = gc.g.read_tensor("encoder_hidden_states");
  Tensor mask = gc.g.read_tensor("encoder_hidden_states_mask");
  const int64_t L = text.dim(1);
  auto valid_of = [&](int64_t b) {
    int64_t n = 0;
    for (int64_t j = 0; j < L; ++j) n += mask.data<int64_t>()[b * L + j] != 0;
    return n;
  };
  const int64_t valid0 = valid_of(1), valid1 = L - 3;
  EXPECT_LT(valid0, L) << "row 1 of the golden should be padded";
  const Tensor text0 = batch_row(text, 1), text1 = batch_row(text, 0).slice0(0, L - 1).clone();
  TimestepConditioning cond = gc.model.condition(gc.g.read_tensor("timestep").template data<float>()[1]);
  const Tensor cond_v = gc.model.forward(latents, text0, valid0, gc.h, gc.w, cond);
  const Tensor neg_v = gc.model.forward(latents, text1, valid1, gc.h, gc.w, cond);
  const auto [cond_b, neg_b] = gc.model.forward_cfg(latents, text0, valid0, text1, valid1, gc.h, gc.w, cond);
  EXPECT_EQ(cond_b.shape(), cond_v.shape());
  EXPECT_EQ(neg_b.shape(), neg_v.shape());
  EXPECT_GT(test::nmse(cond_v, neg_v), 1e-4) << "the two texts should give different velocities";
  EXPECT_LE(test::nmse(cond_b, cond_v), 1e-12);
  EXPECT_LE(test::nmse(neg_b, neg_v), 1e-12);
  EXPECT_EQ(gc.be.count_nonfinite(cond_b) + gc.be.count_nonfinite(neg_b), 0);
  if constexpr (std::is_same_v<CpuKind, SpareRowsOverwritten>) {
    EXPECT_EQ(gc.be.nonfinite_padding, 0) << "K / V rows past a sample, read as masked padding, were not finite";
    return gc.be.overwritten_rows;
  }
  return 0;
}

}  // namespace

TEST(TransformerGolden, CfgBatchMatchesTwoForwardsEvenGrid) { check_cfg_batch("even"); }
TEST(TransformerGolden, CfgBatchMatchesTwoForwardsOddGrid) { check_cfg_batch("odd"); }
TEST(TransformerGolden, EvenGridWithPaddedMask) { check_case("even"); }
TEST(TransformerGolden, OddGridWithPaddedMask) { check_case("odd"); }
TEST(TransformerGolden, NoMask) { check_case("nomask"); }

// A backend that pads attention (CUDA's cuDNN path) overwrites the spare rows past each
// sample's output: one forward and the CFG batch still match diffusers. 3 spare rows stay
// inside sample 1's image rows; 40 reach past them into its text rows and the spare tail.
TEST(TransformerGolden, MatchesWhenAttentionOverwritesItsSpareRows) {
  check_case<SpareRowsOverwritten>("even", int64_t{3});
  for (const int64_t spare : {int64_t{3}, int64_t{40}}) {
    SCOPED_TRACE("spare rows " + std::to_string(spare));
    EXPECT_GT(check_cfg_batch<SpareRowsOverwritten>("odd", spare), 0) << "no attention call was given spare rows";
  }
}

// The conditioning computed while loading (modulation weights released block by block) is the
// conditioning a loaded model computes per step, bit for bit; other model times are refused.
TEST(TransformerGolden, ConditioningAtLoadHasTheSameBits) {
  CpuBackend be;
  const WeightStore store = WeightStore::open(test::golden_weights());
  const Component component = store.component("transformer");
  const TransformerConfig config = TransformerConfig::from(component.config());
  QwenImageTransformer loaded(be, config, ComponentLoader(component));
  ComponentLoader loader(component);
  const std::vector<float> times = {0.9375f, 0.25f, 0.9375f};  // one twice
  QwenImageTransformer at_load(be, config, loader, times);
  EXPECT_TRUE(loaded.conditioning_weights_resident());
  EXPECT_FALSE(at_load.conditioning_weights_resident());
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
  };
  for (float tt : {0.9375f, 0.25f}) {
    SCOPED_TRACE(tt);
    const TimestepConditioning want = loaded.condition(tt), got = at_load.condition(tt);
    EXPECT_TRUE(same_bits(got.temb, want.temb));
    EXPECT_TRUE(same_bits(got.norm_out, want.norm_out));
    ASSERT_EQ(got.img_mod.size(), static_cast<size_t>(config.num_layers));
    ASSERT_EQ(got.txt_mod.size(), static_cast<size_t>(config.num_layers));
    for (int64_t i = 0; i < config.num_layers; ++i) {
      EXPECT_TRUE(same_bits(got.img_mod[static_cast<size_t>(i)], want.img_mod[static_cast<size_t>(i)])) << "block " << i;
      EXPECT_TRUE(same_bits(got.txt_mod[static_cast<size_t>(i)], want.txt_mod[static_cast<size_t>(i)])) << "block " << i;
    }
    // the two model times' vectors differ (the check above can fail)
    EXPECT_GT(test::nmse(at_load.condition(0.25f).img_mod[0], at_load.condition(0.9375f).img_mod[0]), 1e-6);
  }
  try {
    at_load.condition(0.5f);
    ADD_FAILURE() << "a model time outside the plan was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model time 0.5 is not one the conditioning was computed for at load (2 were)"),
              std::string::npos)
        << e.what();
  }
  // When it pays: tables of at most half the weights' bytes (Qwen-Image in bf16: ~8.9 MB per
  // model time against 13.6 GB of modulation weights).
  const TransformerConfig real = parse_model_configs(real_pipeline_configs(), "test").transformer;
  EXPECT_EQ(QwenImageTransformer::conditioning_bytes(real, 50), int64_t{50} * (1 + 12 * 60 + 2) * 3072 * 4);
  EXPECT_TRUE(QwenImageTransformer::conditioning_at_load_pays(real, 50, 2));
  EXPECT_FALSE(QwenImageTransformer::conditioning_at_load_pays(real, 800, 2));
  EXPECT_FALSE(QwenImageTransformer::conditioning_at_load_pays(real, 0, 2));
}

TEST(TransformerGolden, FlopCountOfTheRealModel) {
  // 1024^2 with 20 text tokens: 60 blocks of 2*T*(4D^2 + 2DF) + 4*T^2*D, plus the in/out layers.
  const TransformerConfig real = parse_model_configs(real_pipeline_configs(), "test").transformer;
  const double T = 4096 + 20, D = 3072, F = 12288;
  const double expected = 60 * (2 * T * (4 * D * D + 2 * D * F) + 4 * T * T * D) +
                          2 * (4096 * 64 * D + 20 * 3584 * D + 4096 * D * 64);
  EXPECT_DOUBLE_EQ(QwenImageTransformer::forward_flops(real, 4096, 20), expected);
  // Anchors from shapes alone: one image MLP GEMM is 2*4096*3072*12288 = 309 GFLOP, a forward
  // at 1024^2 is ~68.4 TFLOP (55.6 image + 0.3 text GEMMs + 12.5 attention).
  EXPECT_NEAR(2.0 * 4096 * D * F / 1e9, 309.2, 0.1);
  EXPECT_NEAR(expected / 1e12, 68.43, 0.01);
}
