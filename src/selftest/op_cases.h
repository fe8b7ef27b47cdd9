// Every Backend op as a test case (ggml's test-backend-ops): random inputs (never zeros), a
// float64 reference loop, and a normalised-error bound. test_cpu_ops.cpp checks the CPU
// backend against the float64 reference; test_cuda_ops.cpp checks CUDA against the CPU.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/backend.h"

namespace ditbatch::selftest {

// How an input travels to a backend.
enum class InputKind {
  Activation,  // be.upload(t, be.act_dtype())
  Fp32,        // be.upload(t, F32): residual streams, RoPE tables, sampler tensors
  Weight,      // be.upload_weight(t)
  HostIds,     // stays a host i64 tensor (token ids)
};

struct OpInput {
  Tensor host;
  InputKind kind;
};

struct OpCase {
  std::string name;
  double nmse_bound;  // fp32 CPU vs the float64 reference
  std::vector<OpInput> inputs;
  // Runs the op on backend copies of the inputs (in-place ops work on their copy).
  std::function<Tensor(Backend&, std::vector<Tensor>&)> run;
  // The float64 reference from the host inputs, flattened in the output's row-major order.
  std::function<std::vector<double>(const std::vector<Tensor>&)> reference;
};

std::vector<OpCase> all_op_cases();
// Scaled dot-product attention in float64 (q [Lq, H, Dh], k and v [Lk, Hkv, Dh], host f32),
// flattened [Lq, H, Dh]: the attention cases' reference, and the CUDA attention tests'.
std::vector<double> attention_f64(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal);
// Uploads a case's inputs to a backend according to their kinds.
std::vector<Tensor> upload_inputs(Backend& be, const OpCase& c);

// A call that breaks an op's shape contract (src/core/op_shapes.h): every backend must refuse
// it with an error that names the op and what it expected.
struct ShapeMistake {
  std::string name;
  std::string op;        // the error names it (empty: a user's input error, said in the user's terms)
  std::string expected;  // and says this (the expectation, or the value that broke it)
  std::function<void(Backend&)> call;
};

std::vector<ShapeMistake> all_shape_mistakes();
// Runs the mistake on be: empty when be refused it as it should, else what went wrong.
std::string shape_mistake_failure(Backend& be, const ShapeMistake& mistake);

// Tensors with NaN / Inf planted at known places (and a huge finite value that is not one):
// count_nonfinite must find exactly the planted ones.
struct NonfiniteCase {
  std::string name;
  Tensor host;  // f32
  int64_t expected;
};
std::vector<NonfiniteCase> nonfinite_cases();

}  // namespace ditbatch::selftest
