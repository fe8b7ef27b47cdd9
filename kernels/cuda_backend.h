// The CUDA backend: every Backend op on one NVIDIA GPU. Weights and activations in
// bf16 (or all fp32 for exact comparisons with the CPU), fp32 accumulation everywhere, the
// residual streams fp32 as the models ask. One stream, a caching allocator (no cudaMalloc once
// a resolution's working set has been seen), pinned staging for uploads. kernels/README.md
// has the layout and the precision policy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/backend.h"
#include "core/log.h"

namespace ditbatch {

enum class CudaAttentionPath {
  Auto,   // cuDNN fused SDPA where eligible, else Gemm
  Cudnn,  // cuDNN where eligible, else Gemm (tests: the stats say which ran)
  Gemm,   // materialised: cuBLASLt Q K^T, fp32 softmax kernel, cuBLASLt P V
  Flash,  // our flash-style CUDA-core kernel (head dims up to 384; larger go to Gemm)
};

enum class CudaConvPath {
  Auto,    // cuDNN's fused convolution + bias where eligible (bf16, channels % 8), else Im2col
  Cudnn,   // the same (tests: the stats say which ran)
  Im2col,  // im2col kernel + cuBLASLt GEMM with the bias epilogue, in bands of rows
};

// "auto", "cudnn", "gemm", "flash" / "auto", "cudnn", "im2col": as DITBATCH_CUDA_ATTENTION / _CONV spell them.
const char* attention_path_name(CudaAttentionPath path);
const char* conv_path_name(CudaConvPath path);

struct CudaBackendOptions {
  int device = 0;
  DType act_dtype = DType::BF16;  // BF16: bf16 weights and activations; F32: everything fp32
  CudaAttentionPath attention = CudaAttentionPath::Auto;
  bool poison = false;            // every new allocation filled with 0xFF bytes (NaN)
  bool sync_each_op = false;      // wait after every kernel: an asynchronous fault names its op
  CudaConvPath conv = CudaConvPath::Auto;
  bool cudnn_self_check = true;   // each new cuDNN plan's first output checked against our path
  bool reference_gemm = false;    // every GEMM through our tiled kernel instead of cuBLASLt
  // cuDNN SDPA pads attention lengths up to a multiple of this where the caller leaves room
  // (cuDNN >= 9.15): a few plans per resolution. 0: a plan for every exact length.
  int64_t sdpa_bucket = 128;
  // The GEMM attention path's query rows per chunk at most (0: as many as ~1 GiB of scores and
  // probabilities allow): small values make modest shapes take several chunks (tests).
  int64_t attention_chunk_rows = 0;
  // The defaults, overridden by DITBATCH_CUDA_ACT=bf16|f32, DITBATCH_CUDA_ATTENTION=auto|cudnn|
  // gemm|flash, DITBATCH_CUDA_CONV=auto|cudnn|im2col, DITBATCH_CUDA_POISON=1, DITBATCH_CUDA_SYNC=1,
  // DITBATCH_CUDA_CUDNN_CHECK=0, DITBATCH_CUDA_REFERENCE_GEMM=1, DITBATCH_CUDA_SDPA_BUCKET=N,
  // DITBATCH_CUDA_ATTENTION_CHUNK_ROWS=N.
  static CudaBackendOptions from_env(int device);
};

struct CudaBackendStats {
  size_t bytes_in_use = 0, peak_bytes_in_use = 0;      // tensors and scratch handed out
  size_t bytes_reserved = 0, peak_bytes_reserved = 0;  // held from cudaMalloc (incl. the cache)
  int64_t device_mallocs = 0, allocations = 0;
  int64_t gemm_shapes = 0;  // distinct GEMM shapes planned so far
  int64_t attention_cudnn = 0, attention_gemm = 0, attention_flash = 0;  // calls per path
  int64_t attention_cudnn_padded = 0;  // of the cuDNN calls, those padded to a bucket
  int64_t attention_gemm_chunks = 0;   // query-row chunks the GEMM path's calls took
  std::string sdpa_status;  // "available (...)" or "disabled: why"
  int64_t conv_cudnn = 0, conv_im2col = 0;  // conv2d_3x3 calls per path
  std::string conv_status;  // cuDNN convolution: "available (...)" or "disabled: why"
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(const CudaBackendOptions& options, const Log& log);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override;
  Device device() const override { return Device::Cuda; }
  DType act_dtype() const override;
  DType weight_dtype() const override;  // the act dtype: bf16 weights with bf16 activations, f32 with f32

  Tensor empty(const Shape& shape, DType dtype) override;
  Tensor upload(const Tensor& host, DType dtype) override;
  Tensor upload_weight(const Tensor& host) override;
  Tensor to_host(const Tensor& t) override;
  void copy_(const Tensor& dst, const Tensor& src) override;
  void synchronize() override;
  std::optional<MemoryInfo> device_memory() override;

  using Backend::linear;
  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) override;
  Tensor conv2d_3x3(const Tensor& x, const Tensor& w, const Tensor& bias) override;
  Tensor conv2d_3x3_stride2(const Tensor& x, const Tensor& w, const Tensor& bias) override;
  using Backend::attention;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal, const Tensor& out,
                 int64_t spare_rows) override;
  int64_t attention_spare_rows() const override;

  Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) override;
  Tensor layer_norm_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, float eps) override;
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

  // fused: one cuBLASLt call (GELU_BIAS epilogue), one kernel each
  Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& bias) override;
  void rms_norm_rope(const Tensor& proj, const Tensor& weight, const Tensor& cos, const Tensor& sin, float eps,
                     const Tensor& out) override;
  Tensor gated_add_layer_norm_modulate_(Tensor& x, const Tensor& gate, const Tensor& y, const Tensor& shift,
                                        const Tensor& scale, float eps) override;

  // ---- beyond the Backend interface: tests, benchmarks, diagnostics ----
  const CudaBackendOptions& options() const;
  void set_attention_path(CudaAttentionPath path);
  void set_conv_path(CudaConvPath path);
  CudaBackendStats stats() const;
  void reset_peak_memory();
  // Gives the allocator's cached (unused) blocks back to the device.
  void release_cached_memory();
  // Times fn() on the stream with CUDA events: milliseconds (waits for completion).
  template <typename F>
  double time_ms(F&& fn) {
    const int id = begin_timing();
    fn();
    return end_timing(id);
  }

 private:
  int begin_timing();
  double end_timing(int id);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The backend for --backend cuda: options from the environment (CudaBackendOptions::from_env).
std::unique_ptr<Backend> make_cuda_backend(int device, const Log& log);
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options, const Log& log);

}  // namespace ditbatch
