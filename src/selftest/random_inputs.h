// Random inputs for op checks: uniform in [-scale, scale] from a fixed seed (mt19937), so a
// case is the same on every machine and never all zeros.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.h"

namespace ditbatch::selftest {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline Tensor random_tensor(const Shape& shape, uint32_t seed, float scale = 1.0f) {
  return Tensor::host_f32(shape, random_floats(static_cast<size_t>(shape_numel(shape)), seed, scale));
}

}  // namespace ditbatch::selftest
