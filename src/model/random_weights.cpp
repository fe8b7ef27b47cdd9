#include "model/random_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <random>

#include "core/dtype.h"
#include "core/error.h"

namespace ditbatch {
namespace {

// Each tensor gets its own stream (seed, name), so its values do not depend on the others.
uint64_t stream_key(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the name, mixed with the seed
  for (char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h ^ (seed * 0x9E3779B97F4A7C15ull);
}

int64_t fan_in_of(const Shape& shape) {
  const int64_t n = shape_numel(shape);
  if (shape.size() == 5) return shape[1] * shape[3] * shape[4];  // one temporal slice is used
  return shape.size() > 1 ? n / shape[0] : 1;
}

// g ~ (0, 1) -> the value for this kind of tensor.
struct Scaling {
  double mean, sd;
};
Scaling scaling_of(WeightInit init, int64_t fan_in) {
  switch (init) {
    case WeightInit::Matrix:
      return {0.0, 1.0 / std::sqrt(static_cast<double>(fan_in))};
    case WeightInit::Bias:
      return {0.0, 0.02};
    case WeightInit::Gain:
      return {1.0, 0.1};
    case WeightInit::Embedding:
      return {0.0, 1.0};
  }
  return {0.0, 1.0};
}

void fill_normal(uint64_t key, const WeightSpec& spec, float* out) {
  std::mt19937_64 rng(key);
  std::normal_distribution<double> normal(0.0, 1.0);
  const int64_t n = shape_numel(spec.shape);
  const double fan_in = static_cast<double>(fan_in_of(spec.shape));
  // The exact expressions make-tiny has always used: its files must not change by a bit.
  for (int64_t i = 0; i < n; ++i) {
    const double g = normal(rng);
    float& x = out[i];
    switch (spec.init) {
      case WeightInit::Matrix:
        x = static_cast<float>(g / std::sqrt(fan_in));
        break;
      case WeightInit::Bias:
        x = static_cast<float>(0.02 * g);
        break;
      case WeightInit::Gain:
        x = static_cast<float>(1.0 + 0.1 * g);
        break;
      case WeightInit::Embedding:
        x = static_cast<float>(g);
        break;
    }
  }
}

// SplitMix64's finaliser: a counter-based generator, so any element can be made on any thread.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void fill_uniform(uint64_t key, const WeightSpec& spec, float* out) {
  const int64_t n = shape_numel(spec.shape);
  const Scaling s = scaling_of(spec.init, fan_in_of(spec.shape));
  // u in (-1, 1) with 2^24 equally likely midpoints; sqrt(3) * u has unit variance.
  const float half_width = static_cast<float>(std::sqrt(3.0) * s.sd);
  const float mean = static_cast<float>(s.mean);
  const float step = 0x1p-23f, offset = 0x1p-24f - 1.0f;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bits = mix64(key + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull);
    const float u = static_cast<float>(bits >> 40) * step + offset;
    out[i] = mean + half_width * u;
  }
}

}  // namespace

void fill_random(uint64_t seed, const WeightSpec& spec, RandomDraw draw, float* out) {
  const uint64_t key = stream_key(seed, spec.name);
  if (draw == RandomDraw::Normal)
    fill_normal(key, spec, out);
  else
    fill_uniform(key, spec, out);
}

std::vector<float> random_values(uint64_t seed, const WeightSpec& spec) {
  std::vector<float> v(static_cast<size_t>(shape_numel(spec.shape)));
  fill_random(seed, spec, RandomDraw::Normal, v.data());
  return v;
}

namespace {
Tensor in_dtype(Tensor t, DType dtype) {
  if (dtype == DType::F32) return t;
  Tensor out = Tensor::host(t.shape(), dtype);
  convert_from_f32(t.data<float>(), out.raw(), dtype, static_cast<size_t>(t.numel()));
  return out;
}
}  // namespace

Tensor random_input(const std::string& name, const Shape& shape, uint64_t seed, DType dtype, float sd) {
  Tensor t = Tensor::host(shape, DType::F32);
  fill_random(seed, WeightSpec{name, shape, WeightInit::Embedding, "random input"}, RandomDraw::Uniform,
              t.data<float>());
  if (sd != 1.0f)
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] *= sd;
  return in_dtype(std::move(t), dtype);
}

RandomWeights::RandomWeights(uint64_t seed, RandomDraw draw, RandomReuse reuse, DType dtype)
    : seed_(seed), draw_(draw), reuse_(reuse), dtype_(dtype) {
  DITBATCH_CHECK(dtype == DType::F32 || dtype == DType::BF16, "random weights: dtype {} (expected f32 or bf16)",
                 dtype_name(dtype));
}

Tensor RandomWeights::make(const WeightSpec& spec) const {
  Tensor t = Tensor::host(spec.shape, DType::F32);
  fill_random(seed_, spec, draw_, t.data<float>());
  return in_dtype(std::move(t), dtype_);
}

Tensor RandomWeights::bind(const std::string& name, const Shape& shape, WeightInit init, const std::string& why) {
  ++tensors_;
  values_ += shape_numel(shape);
  if (reuse_ == RandomReuse::PerTensor) return make(WeightSpec{name, shape, init, why});
  const auto key = std::make_pair(shape, static_cast<int>(init));
  auto it = shared_.find(key);
  if (it == shared_.end())
    it = shared_.emplace(key, make(WeightSpec{fmt::format("shared {} {}", fmt::join(shape, "x"), key.second), shape,
                                              init, why}))
             .first;
  return it->second;
}

}  // namespace ditbatch
