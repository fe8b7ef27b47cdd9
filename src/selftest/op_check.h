// One op case on a backend against its reference (ggml's test-backend-ops): the case's float64
// loop where the backend is the CPU; otherwise the CPU backend on the inputs as that backend
// saw them (activations and weights rounded to bf16 in bf16 mode), within a bound set by the
// output's dtype. Attention in bf16 is also held to FlashAttention's rule: its error against
// float64 at most 2x (4x in squared error) that of a naive bf16 implementation. The tests
// (test_cpu_ops, test_cuda_ops) and `ditbatch selftest` run every case through this function.
#pragma once

#include <string>
#include <vector>

#include "core/backend.h"
#include "selftest/op_cases.h"

namespace ditbatch::selftest {

struct OpCheck {
  std::string name;       // the case
  std::string mode;       // the backend's activation dtype: "f32" or "bf16"
  std::string reference;  // "float64" (the CPU backend) or "cpu" (any other backend)
  double error = 0;       // nmse against the reference
  double bound = 0;
  // Attention in bf16: nmse against float64 of the backend and of naive bf16 attention.
  double error_vs_f64 = -1, naive_bf16_vs_f64 = -1;
  int64_t nonfinite = 0;  // NaN / Inf elements in the output (an unwritten, poisoned one shows here)
  std::string failure;    // why it failed; empty: passed
  bool passed() const { return failure.empty(); }
};

OpCheck check_op_case(Backend& be, const OpCase& c);

// The cases a quick check runs: the first case of each op (its name up to the first shape
// token, e.g. "linear" of "linear_M37_K70_N19_bias").
std::vector<OpCase> quick_op_cases();
std::string op_family(const std::string& case_name);

// Naive bf16 attention as torch computes it in bf16 eager mode: Q K^T rounded to bf16, times
// the scale rounded to bf16, softmax in fp32 rounded to bf16, P V rounded to bf16. Flattened
// [Lq, H, Dh]; the yardstick of FlashAttention's rule.
std::vector<double> naive_bf16_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal);
// A host f32 copy of t with every value rounded to bf16 (round to nearest even, as uploads do).
Tensor round_bf16(const Tensor& host);
// sum((out - ref)^2) / sum(ref^2) in double (sum of squares where ref is all zero).
double nmse(const Tensor& out, const std::vector<double>& ref);
double nmse(const Tensor& out, const Tensor& ref);

}  // namespace ditbatch::selftest
