// Helpers for the .cu files: element conversion, warp reductions, launch sizes and the dtype
// dispatch that turns a run-time DType into a kernel template argument.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "cuda_check.h"
#include "cuda_context.h"

namespace ditbatch::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_f<bf16>(float x) {  // round to nearest even, NaN stays NaN
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

constexpr int kThreads = 256;        // threads per block for element-wise and row kernels
constexpr int kWarpsPerBlock = kThreads / 32;

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, never more than needed.
inline unsigned grid_for(const CudaContext& ctx, int64_t n) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const int64_t cap = std::max<int64_t>(1, int64_t{ctx.sm_count > 0 ? ctx.sm_count : 132} * 16);
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, cap)));
}
// Blocks for one warp per row.
inline unsigned grid_for_rows(int64_t rows) {
  return static_cast<unsigned>(std::max<int64_t>(1, (rows + kWarpsPerBlock - 1) / kWarpsPerBlock));
}

// Calls f(T{}) with T = float or bf16 for the run-time dtype; anything else fails naming op and what.
template <typename F>
void dispatch_float(DType t, const char* op, const char* what, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); return;
    case DType::BF16: f(bf16{}); return;
    default: fail(cat(op, ": ", what, " must be f32 or bf16, got ", dtype_name(t)));
  }
}

// Three run-time dtypes at once (a kernel over three operands): f(T1{}, T2{}, T3{}).
template <typename F>
void dispatch_float3(const char* op, DType t1, const char* what1, DType t2, const char* what2, DType t3,
                     const char* what3, F&& f) {
  dispatch_float(t1, op, what1, [&](auto a) {
    dispatch_float(t2, op, what2, [&](auto b) { dispatch_float(t3, op, what3, [&](auto c) { f(a, b, c); }); });
  });
}

}  // namespace ditbatch::cuda
