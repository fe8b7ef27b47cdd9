// The CPU backend: every Backend op in fp32, fast enough to run the whole pipeline in tests
// (OpenBLAS GEMMs, SLEEF's vector exp and tanh, OpenMP over rows and heads). Its ops are held
// to the float64 loops of the op cases; the other backends are held to it. Each output element
// is computed by one fixed sequence of operations, whatever the thread count, so results do not
// depend on OMP_NUM_THREADS.
#pragma once

#include "core/backend.h"

namespace ditbatch {

class CpuBackend : public Backend {
 public:
  // Every GEMM runs on a fixed grid of tiles that OpenMP shares out, each tile one
  // single-threaded OpenBLAS call, so no result depends on the thread count (OpenBLAS's own
  // threading splits the work by the number of threads, which changes the bits of some rows).
  CpuBackend();
  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::Host; }
  DType act_dtype() const override { return DType::F32; }
  DType weight_dtype() const override { return DType::F32; }

  Tensor empty(const Shape& shape, DType dtype) override;
  Tensor upload(const Tensor& host, DType dtype) override;
  Tensor upload_weight(const Tensor& host) override;
  Tensor to_host(const Tensor& t) override;
  void copy_(const Tensor& dst, const Tensor& src) override;
  void synchronize() override {}

  using Backend::linear;
  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) override;
  Tensor conv2d_3x3(const Tensor& x, const Tensor& w, const Tensor& bias) override;
  Tensor conv2d_3x3_stride2(const Tensor& x, const Tensor& w, const Tensor& bias) override;
  using Backend::attention;
  // Exact lengths: spare rows are checked and left alone.
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal, const Tensor& out,
                 int64_t spare_rows) override;

  Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) override;
  Tensor layer_norm_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale,
                             float eps) override;
  Tensor l2_normalize(const Tensor& x, const Tensor& gamma, float scale) override;

  Tensor silu(const Tensor& x) override;
  Tensor gelu_tanh(const Tensor& x) override;
  Tensor gelu_erf(const Tensor& x) override;
  Tensor silu_mul(const Tensor& gate, const Tensor& up) override;
  void add_(Tensor& x, const Tensor& y) override;
  void gated_add_(Tensor& x, const Tensor& gate, const Tensor& y) override;
  void clamp_(Tensor& x, float lo, float hi) override;
  void axpy_(Tensor& x, float alpha, const Tensor& y) override;
  void div_(Tensor& x, const Tensor& y) override;
  void scale_rows_(Tensor& x, const Tensor& s) override;
  void scale_shift_(Tensor& x, float scale, float shift) override;
  Tensor to_u8(const Tensor& x) override;
  Tensor row_norms(const Tensor& x) override;

  void rope_interleaved_(Tensor& x, const Tensor& cos, const Tensor& sin) override;
  void rope_neox_(Tensor& x, const Tensor& cos, const Tensor& sin) override;

  Tensor embedding(const Tensor& table, const Tensor& ids) override;
  Tensor upsample_nearest2x(const Tensor& x) override;


  Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) override;
  int64_t count_nonfinite(const Tensor& x) override;
};

}  // namespace ditbatch
