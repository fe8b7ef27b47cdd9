// GEMMs through cuBLASLt (C++17: included by .cu files).
//
// Column-major, as cuBLAS sees it: D[m, n] = alpha * op(A)[m, k] * op(B)[k, n] (+ bias[m]),
// batched with strides. Operands are bf16 or f32 (A and B alike), D is bf16 or f32, the
// accumulation is always fp32 (CUBLAS_COMPUTE_32F: no TF32), split-K partial sums included (the
// preference allows no reduction in the output type: gemm_preference.h).
// A row-major Linear y[M, N] = x[M, K] w[N, K]^T is the "TN" call m = N, n = M, k = K with
// A = w (transposed), B = x, D = y (see linear_gemm()).
//
// Per distinct call shape (sizes, strides, types, epilogue, pointer alignments) the matmul
// descriptor, the layouts and the algorithm (the heuristic's first result that reduces in fp32:
// deterministic for a given library, GPU and shape) are made once and cached; a 32 MiB workspace is shared by all calls.
// When cuBLASLt offers no algorithm for a shape, a simple tiled kernel of our own runs it
// (gemm_reference.cu) and a warning says so once.
#pragma once

#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "cuda_context.h"

// cuBLASLt's handle type, as cublasLt.h declares it (only gemm.cpp needs the whole header).
typedef struct cublasLtContext* cublasLtHandle_t;

namespace ditbatch::cuda {

enum class GemmEpilogue { None, Bias, GeluBias };  // GeluBias: tanh-GELU(acc + bias)

struct GemmOperand {
  const void* ptr = nullptr;
  DType dtype = DType::BF16;
  bool transposed = false;   // op(X) = X^T
  int64_t ld = 0;            // leading dimension of the stored (column-major) matrix
  int64_t batch_stride = 0;  // elements between consecutive matrices of a batch
};

struct GemmCall {
  const char* op = "gemm";  // the Backend op, for error messages
  int64_t m = 0, n = 0, k = 0;
  GemmOperand a, b;
  void* d = nullptr;
  DType d_dtype = DType::BF16;
  int64_t ldd = 0;
  int64_t d_batch_stride = 0;
  int batch = 1;
  float alpha = 1.0f;
  GemmEpilogue epilogue = GemmEpilogue::None;
  const void* bias = nullptr;  // [m], same dtype as D, 16-byte aligned
};

class GemmEngine {
 public:
  GemmEngine(int device, cudaStream_t stream);
  ~GemmEngine();
  GemmEngine(const GemmEngine&) = delete;
  GemmEngine& operator=(const GemmEngine&) = delete;

  void run(const CudaContext& ctx, const GemmCall& call);
  // Every call through the reference kernel (tests: checks the cuBLASLt path against it).
  void set_force_reference(bool on) { force_reference_ = on; }
  int64_t cached_shapes() const;
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  struct Plan;
  struct Cache;
  Plan& plan_for(const CudaContext& ctx, const GemmCall& call);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = size_t{32} << 20;
  bool force_reference_ = false;
  std::unique_ptr<Cache> cache_;
};

// The reference kernel (also the fallback): any transposes, strides, batch and epilogue.
void gemm_reference(const CudaContext& ctx, const GemmCall& call);

// y[M, N] = x[M, K] w[N, K]^T (+ bias[N]) for dense row-major x, w, y.
inline void linear_gemm(const CudaContext& ctx, const char* op, const void* x, const void* w, DType in_dtype,
                        void* y, DType out_dtype, int64_t M, int64_t N, int64_t K, const void* bias,
                        GemmEpilogue epilogue) {
  GemmCall c;
  c.op = op;
  c.m = N;
  c.n = M;
  c.k = K;
  c.a = GemmOperand{w, in_dtype, true, K, 0};
  c.b = GemmOperand{x, in_dtype, false, K, 0};
  c.d = y;
  c.d_dtype = out_dtype;
  c.ldd = N;
  c.epilogue = epilogue;
  c.bias = bias;
  ctx.gemm->run(ctx, c);
}

}  // namespace ditbatch::cuda
