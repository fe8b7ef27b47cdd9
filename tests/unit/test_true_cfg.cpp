// True CFG composed from the Backend's generic ops (pipeline/true_cfg) against diffusers'
// formula in float64, and against the same formula as f32 arithmetic makes it (three rounded
// ops, norms summed in double), which the composition must reproduce bit for bit.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/cpu_backend.h"
#include "pipeline/true_cfg.h"
#include "test_util.h"

using namespace ditbatch;

TEST(TrueCfg, MatchesDiffusersFormula) {
  CpuBackend be;
  const int64_t R = 37, C = 64;
  const float scale = 4.0f;
  const Tensor cond = test::random_tensor({R, C}, 71, 2.0f), neg = test::random_tensor({R, C}, 72, 2.0f);
  const Tensor out = true_cfg_combine(be, cond, neg, scale);
  ASSERT_EQ(out.shape(), cond.shape());
  const float* cp = cond.data<float>();
  const float* np = neg.data<float>();
  std::vector<double> reference(static_cast<size_t>(R * C));
  std::vector<float> f32_formula(static_cast<size_t>(R * C));
  for (int64_t r = 0; r < R; ++r) {
    double cond_sq = 0, comb_sq = 0, comb32_sq = 0, cond32_sq = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double v = cp[r * C + c], n = np[r * C + c], comb = n + scale * (v - n);
      reference[static_cast<size_t>(r * C + c)] = comb;
      cond_sq += v * v;
      comb_sq += comb * comb;
      const float d32 = cp[r * C + c] - np[r * C + c];
      const float s32 = scale * d32;
      const float comb32 = np[r * C + c] + s32;
      f32_formula[static_cast<size_t>(r * C + c)] = comb32;
      cond32_sq += static_cast<double>(cp[r * C + c]) * cp[r * C + c];
      comb32_sq += static_cast<double>(comb32) * comb32;
    }
    for (int64_t c = 0; c < C; ++c) reference[static_cast<size_t>(r * C + c)] *= std::sqrt(cond_sq) / std::sqrt(comb_sq);
    const float ratio = static_cast<float>(std::sqrt(cond32_sq)) / static_cast<float>(std::sqrt(comb32_sq));
    for (int64_t c = 0; c < C; ++c) f32_formula[static_cast<size_t>(r * C + c)] *= ratio;
  }
  double num = 0, den = 0;  // the normalised error against float64, as the op tests measure it
  for (int64_t i = 0; i < R * C; ++i) {
    const double d = out.data<float>()[i] - reference[static_cast<size_t>(i)];
    num += d * d;
    den += reference[static_cast<size_t>(i)] * reference[static_cast<size_t>(i)];
  }
  EXPECT_LE(num / den, 1e-13);
  for (int64_t i = 0; i < R * C; ++i)
    ASSERT_EQ(out.data<float>()[i], f32_formula[static_cast<size_t>(i)]) << "element " << i;
  // Each row keeps the conditioned prediction's norm.
  for (int64_t r = 0; r < R; ++r) {
    double out_sq = 0, cond_sq = 0;
    for (int64_t c = 0; c < C; ++c) {
      out_sq += static_cast<double>(out.data<float>()[r * C + c]) * out.data<float>()[r * C + c];
      cond_sq += static_cast<double>(cp[r * C + c]) * cp[r * C + c];
    }
    EXPECT_NEAR(std::sqrt(out_sq), std::sqrt(cond_sq), 1e-5 * std::sqrt(cond_sq)) << "row " << r;
  }
}

TEST(TrueCfg, RefusesMismatchedPredictions) {
  CpuBackend be;
  const Tensor cond = test::random_tensor({4, 8}, 73), neg = test::random_tensor({4, 7}, 74);
  try {
    true_cfg_combine(be, cond, neg, 4.0f);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("true CFG: cond f32[4, 8] and neg f32[4, 7]"), std::string::npos) << e.what();
  }
}
