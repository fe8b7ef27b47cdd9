// The random weights of benchmarks and make-tiny: their statistics against the documented
// scalings, the per-shape reuse and the bf16 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/random_weights.h"

namespace ditbatch {
namespace {

struct Moments {
  double mean = 0, sd = 0;
};

Moments moments(const Tensor& t) {
  double sum = 0, sum_sq = 0;
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) sum += p[i], sum_sq += static_cast<double>(p[i]) * p[i];
  const double n = static_cast<double>(t.numel()), mean = sum / n;
  return {mean, std::sqrt(sum_sq / n - mean * mean)};
}

// bf16 by round-to-nearest-even of the f32 bits, written out here (NaN-free inputs).
uint16_t bf16_of(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

TEST(RandomWeights, BothDrawsHaveTheDocumentedMeanAndSpread) {
  // Matrices ~ 1/sqrt(fan_in), biases 0.02, gains 1 +- 0.1, embeddings 1 (random_weights.h).
  for (RandomDraw draw : {RandomDraw::Normal, RandomDraw::Uniform}) {
    RandomWeights w(7, draw);
    const Moments m = moments(w.bind("m", {256, 400}, WeightInit::Matrix, "test"));
    EXPECT_NEAR(m.mean, 0.0, 0.002);
    EXPECT_NEAR(m.sd, 1.0 / std::sqrt(400.0), 0.001);
    const Moments g = moments(w.bind("g", {100000}, WeightInit::Gain, "test"));
    EXPECT_NEAR(g.mean, 1.0, 0.002);
    EXPECT_NEAR(g.sd, 0.1, 0.002);
    const Moments b = moments(w.bind("b", {100000}, WeightInit::Bias, "test"));
    EXPECT_NEAR(b.sd, 0.02, 0.0005);
    EXPECT_EQ(w.tensors(), 3);
    EXPECT_EQ(w.values(), 256 * 400 + 200000);
  }
}

TEST(RandomWeights, PerShapeHandsOutOneTensorForEachShapeAndInit) {
  RandomWeights w(7, RandomDraw::Uniform, RandomReuse::PerShape);
  const Tensor a = w.bind("blocks.0.w", {64, 32}, WeightInit::Matrix, "test");
  const Tensor b = w.bind("blocks.1.w", {64, 32}, WeightInit::Matrix, "test");
  const Tensor c = w.bind("blocks.0.norm", {64, 32}, WeightInit::Gain, "test");
  const Tensor d = w.bind("blocks.0.v", {32, 64}, WeightInit::Matrix, "test");
  EXPECT_EQ(a.raw(), b.raw());
  EXPECT_NE(a.raw(), c.raw());
  EXPECT_NE(a.raw(), d.raw());
  EXPECT_EQ(w.tensors(), 4);
  EXPECT_EQ(w.values(), 4 * 64 * 32);  // counted as the model's parameters, shared or not
  // Per tensor, two names draw two streams.
  RandomWeights each(7, RandomDraw::Uniform);
  const Tensor e = each.bind("blocks.0.w", {64, 32}, WeightInit::Matrix, "test");
  const Tensor f = each.bind("blocks.1.w", {64, 32}, WeightInit::Matrix, "test");
  EXPECT_NE(std::memcmp(e.raw(), f.raw(), e.nbytes()), 0);
}

TEST(RandomWeights, Bf16IsTheRoundedF32Draw) {
  RandomWeights f32(9, RandomDraw::Uniform), bf16(9, RandomDraw::Uniform, RandomReuse::PerTensor, DType::BF16);
  const Tensor x = f32.bind("w", {33, 70}, WeightInit::Matrix, "test");
  const Tensor y = bf16.bind("w", {33, 70}, WeightInit::Matrix, "test");
  ASSERT_EQ(y.dtype(), DType::BF16);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < x.numel(); ++i) mismatches += y.data<uint16_t>()[i] != bf16_of(x.data<float>()[i]);
  EXPECT_EQ(mismatches, 0);
  EXPECT_THROW(RandomWeights(9, RandomDraw::Uniform, RandomReuse::PerTensor, DType::I64), Error);
}

TEST(RandomWeights, InputsAreScaledUnitDraws) {
  const Tensor unit = random_input("x", {300, 300}, 5);
  const Moments m = moments(unit);
  EXPECT_NEAR(m.mean, 0.0, 0.01);
  EXPECT_NEAR(m.sd, 1.0, 0.01);
  const Tensor small = random_input("x", {300, 300}, 5, DType::F32, 0.02f);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < unit.numel(); ++i) mismatches += small.data<float>()[i] != unit.data<float>()[i] * 0.02f;
  EXPECT_EQ(mismatches, 0);
  const Tensor b = random_input("x", {300, 300}, 5, DType::BF16);
  for (int64_t i = 0; i < 1000; ++i) mismatches += b.data<uint16_t>()[i] != bf16_of(unit.data<float>()[i]);
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace ditbatch
