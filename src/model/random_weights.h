// Deterministic random weights, drawn by a tensor's spec (name, shape, init) and a seed.
//
// Two draws:
// - Normal: the make-tiny stream. Each tensor has its own mt19937_64 seeded from (seed, name),
//   drawn through std::normal_distribution: matrices ~ N(0, 1/fan_in), biases ~ N(0, 0.02^2),
//   gains ~ N(1, 0.1^2), embeddings ~ N(0, 1). Sequential (about 40 ns a value); the tiny
//   files are defined by it, so it never changes.
// - Uniform: for benchmarks at full size (20B values). Value i of a tensor is a hash of
//   (seed, name, i), uniform with the same mean and variance as the Normal draw, filled in
//   parallel and independent of the thread count (about 4 ns a value per thread, first touch of
//   the memory included: the real 20B transformer in ~5 s on 16 cores).
// Either way a tensor is generated straight into its own buffer: no model-sized intermediate.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/weights.h"

namespace ditbatch {

enum class RandomDraw { Normal, Uniform };

// The values of one tensor, written to out[0 .. numel(spec.shape)).
void fill_random(uint64_t seed, const WeightSpec& spec, RandomDraw draw, float* out);
// The make-tiny values of one tensor (the Normal draw).
std::vector<float> random_values(uint64_t seed, const WeightSpec& spec);

// A deterministic random input tensor of a benchmark: the Uniform draw with mean 0 and
// standard deviation sd (never zeros, no denormals), in f32 or bf16.
Tensor random_input(const std::string& name, const Shape& shape, uint64_t seed, DType dtype = DType::F32,
                    float sd = 1.0f);

// How many host tensors a RandomWeights makes. PerTensor: each bound tensor its own values.
// PerShape: one per (shape, init), handed out for every tensor of that shape (values then
// follow the shape, not the name): the real 20B transformer binds in seconds, and each weight
// still gets its own device copy (upload_weight), so a GPU's memory and bandwidth are those of
// the real model.
enum class RandomReuse { PerTensor, PerShape };

// A WeightBinder that makes every bound tensor from its spec instead of reading it, as host
// tensors of `dtype` (f32 or bf16).
class RandomWeights final : public WeightBinder {
 public:
  explicit RandomWeights(uint64_t seed, RandomDraw draw = RandomDraw::Normal,
                         RandomReuse reuse = RandomReuse::PerTensor, DType dtype = DType::F32);
  Tensor bind(const std::string& name, const Shape& shape, WeightInit init, const std::string& why) override;

  int64_t tensors() const { return tensors_; }
  int64_t values() const { return values_; }  // parameters bound so far

 private:
  Tensor make(const WeightSpec& spec) const;
  uint64_t seed_;
  RandomDraw draw_;
  RandomReuse reuse_;
  DType dtype_;
  std::map<std::pair<Shape, int>, Tensor> shared_;
  int64_t tensors_ = 0;
  int64_t values_ = 0;
};

}  // namespace ditbatch
