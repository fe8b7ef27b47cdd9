// Rotary position embedding in place, one thread per rotated pair. Both variants rotate
// (a, b) by the angle whose cos/sin the table holds, as torch's complex multiply does it:
// every product rounded, then one add or subtract (no FMA), so f32 runs match the CPU exactly.
#include "device_utils.cuh"
#include "launch.h"

namespace ditbatch::cuda {

// ---------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------

template <typename T, bool kInterleaved>
__global__ void rope_kernel(T* __restrict__ x, const float* __restrict__ cos_table,
                            const float* __restrict__ sin_table, int64_t pairs, int64_t H, int64_t half) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < pairs; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t m = i % half, head_row = i / half, l = head_row / H;
    T* v = x + head_row * 2 * half;
    const int64_t ia = kInterleaved ? 2 * m : m, ib = kInterleaved ? 2 * m + 1 : m + half;
    const float a = to_f(v[ia]), b = to_f(v[ib]);
    const float c = cos_table[l * half + m], s = sin_table[l * half + m];
    v[ia] = from_f<T>(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
    v[ib] = from_f<T>(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
  }
}

// ---------------------------------------------------------------------------------------------
// launcher
// ---------------------------------------------------------------------------------------------

void rope_inplace(const CudaContext& ctx, void* x, DType dtype, const float* cos, const float* sin, int64_t L,
                  int64_t H, int64_t Dh, bool interleaved) {
  const char* op = interleaved ? "rope_interleaved_" : "rope_neox_";
  if (L < 0 || H <= 0 || Dh <= 0 || Dh % 2 != 0) fail(cat(op, ": L ", L, " H ", H, " Dh ", Dh, " (Dh must be even)"));
  const int64_t half = Dh / 2, pairs = L * H * half;
  if (pairs == 0) return;
  dispatch_float(dtype, op, "x", [&](auto t) {
    using T = decltype(t);
    if (interleaved)
      rope_kernel<T, true><<<grid_for(ctx, pairs), kThreads, 0, ctx.stream>>>(static_cast<T*>(x), cos, sin, pairs, H,
                                                                              half);
    else
      rope_kernel<T, false><<<grid_for(ctx, pairs), kThreads, 0, ctx.stream>>>(static_cast<T*>(x), cos, sin, pairs,
                                                                               H, half);
  });
  ctx.launched(op);
}

}  // namespace ditbatch::cuda
