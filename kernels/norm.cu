// Row normalisations (one warp per row, any width): RMSNorm, LayerNorm + modulation, the
// Wan-VAE L2 norm, the fused residual add + LayerNorm, the fused per-head RMSNorm + RoPE,
// and the CFG combine with its per-row norm rescale. Sums are fp32 per lane
// then a butterfly across the warp (every lane ends with the same value); LayerNorm is
// two-pass (mean, then centred squares): the residual stream reaches ~1e7.
#include <cmath>

#include "device_utils.cuh"
#include "launch.h"

namespace ditbatch::cuda {

// ---------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------

// The sum of squares of one row, reduced across the warp (every lane gets it).
template <typename T>
__device__ __forceinline__ float warp_sum_sq(const T* row, int cols, int lane) {
  float sum_sq = 0.0f;
  for (int c = lane; c < cols; c += 32) {
    const float v = to_f(row[c]);
    sum_sq += v * v;
  }
  return warp_sum(sum_sq);
}

template <typename TX, typename TW, typename TY>
__global__ void rms_norm_kernel(const TX* __restrict__ x, const TW* __restrict__ weight, TY* __restrict__ y,
                                int64_t rows, int cols, float eps) {
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const TX* xr = x + row * cols;
  const float inv_rms = 1.0f / sqrtf(warp_sum_sq(xr, cols, lane) / static_cast<float>(cols) + eps);
  TY* yr = y + row * cols;
  for (int c = lane; c < cols; c += 32) yr[c] = from_f<TY>(__fmul_rn(__fmul_rn(to_f(xr[c]), inv_rms), to_f(weight[c])));
}

// One row by one warp: LayerNorm without affine (two passes: mean, then centred squares),
// then y = normed * (1 + scale) + shift.
template <typename TX, typename TS, typename TY>
__device__ __forceinline__ void layer_norm_modulate_row(const TX* xr, const TS* __restrict__ shift,
                                                        const TS* __restrict__ scale, TY* __restrict__ yr, int cols,
                                                        float eps, int lane) {
  float sum = 0.0f;
  for (int c = lane; c < cols; c += 32) sum += to_f(xr[c]);
  const float mean = warp_sum(sum) / static_cast<float>(cols);
  float sum_sq = 0.0f;
  for (int c = lane; c < cols; c += 32) {
    const float d = to_f(xr[c]) - mean;
    sum_sq += d * d;
  }
  const float variance = warp_sum(sum_sq) / static_cast<float>(cols);
  const float rstd = 1.0f / sqrtf(variance + eps);
  const float bias = -rstd * mean;  // torch: y = x * rstd + (-rstd * mean)
  for (int c = lane; c < cols; c += 32) {
    const float normed = __fadd_rn(__fmul_rn(to_f(xr[c]), rstd), bias);
    yr[c] = from_f<TY>(__fadd_rn(__fmul_rn(normed, __fadd_rn(1.0f, to_f(scale[c]))), to_f(shift[c])));
  }
}

template <typename TX, typename TS, typename TY>
__global__ void layer_norm_modulate_kernel(const TX* __restrict__ x, const TS* __restrict__ shift,
                                           const TS* __restrict__ scale, TY* __restrict__ y, int64_t rows, int cols,
                                           float eps) {
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (row >= rows) return;
  layer_norm_modulate_row(x + row * cols, shift, scale, y + row * cols, cols, eps, threadIdx.x % 32);
}

template <typename TX, typename TG, typename TY>
__global__ void l2_normalize_kernel(const TX* __restrict__ x, const TG* __restrict__ gamma, TY* __restrict__ y,
                                    int64_t rows, int cols, float scale) {
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const TX* xr = x + row * cols;
  const float norm = fmaxf(sqrtf(warp_sum_sq(xr, cols, lane)), 1e-12f);
  TY* yr = y + row * cols;
  for (int c = lane; c < cols; c += 32)
    yr[c] = from_f<TY>(__fmul_rn(__fmul_rn(__fdiv_rn(to_f(xr[c]), norm), scale), to_f(gamma[c])));
}

// x += gate * y (x f32, the residual stream; as gated_add_kernel), then out = LN(x) * (1 +
// scale) + shift: the residual add and the next LayerNorm in one kernel. Each lane re-reads
// only what it wrote.
template <typename TM, typename TY, typename TO>
__global__ void gated_add_layer_norm_modulate_kernel(float* __restrict__ x, const TM* __restrict__ gate,
                                                     const TY* __restrict__ y, const TM* __restrict__ shift,
                                                     const TM* __restrict__ scale, TO* __restrict__ out,
                                                     int64_t rows, int cols, float eps) {
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float* xr = x + row * cols;
  const TY* yr = y + row * cols;
  for (int c = lane; c < cols; c += 32) xr[c] = __fadd_rn(xr[c], __fmul_rn(to_f(gate[c]), to_f(yr[c])));
  layer_norm_modulate_row(static_cast<const float*>(xr), shift, scale, out + row * cols, cols, eps, lane);
}

// One warp per (token, head): RMSNorm over the head's Dh values with gain w, rounded to the
// output dtype (as rms_norm's output would be), then the interleaved-pair rotation of
// rope_kernel, written to out row (token, head) of a [tokens, H * Dh] block.
template <typename TP, typename TW, typename TO>
__global__ void rms_norm_rope_kernel(const TP* __restrict__ proj, const TW* __restrict__ weight,
                                     const float* __restrict__ cos_table, const float* __restrict__ sin_table,
                                     TO* __restrict__ out, int64_t head_rows, int64_t H, int half, float eps) {
  const int64_t hr = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (hr >= head_rows) return;
  const int64_t token = hr / H;
  const int Dh = 2 * half;
  const TP* xr = proj + hr * Dh;
  const float inv_rms = 1.0f / sqrtf(warp_sum_sq(xr, Dh, lane) / static_cast<float>(Dh) + eps);
  TO* orow = out + hr * Dh;
  for (int m = lane; m < half; m += 32) {
    const float a = to_f(from_f<TO>(__fmul_rn(__fmul_rn(to_f(xr[2 * m]), inv_rms), to_f(weight[2 * m]))));
    const float b = to_f(from_f<TO>(__fmul_rn(__fmul_rn(to_f(xr[2 * m + 1]), inv_rms), to_f(weight[2 * m + 1]))));
    const float c = cos_table[token * half + m], s = sin_table[token * half + m];
    orow[2 * m] = from_f<TO>(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
    orow[2 * m + 1] = from_f<TO>(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
  }
}

// Sums in double: the norm scales every element of a row where it is used.
template <typename T>
__global__ void row_norms_kernel(const T* __restrict__ x, float* __restrict__ out, int64_t rows, int cols) {
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* xr = x + row * cols;
  double sum_sq = 0.0;
  for (int c = lane; c < cols; c += 32) {
    const float v = to_f(xr[c]);
    sum_sq += static_cast<double>(v) * v;
  }
  sum_sq = warp_sum(sum_sq);
  if (lane == 0) out[row] = static_cast<float>(sqrt(sum_sq));
}

// ---------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------

namespace {
void check_rows(const char* op, int64_t rows, int64_t cols) {
  if (rows < 0 || cols <= 0 || cols > (int64_t{1} << 30)) fail(cat(op, ": rows ", rows, " cols ", cols));
}
}  // namespace

void rms_norm(const CudaContext& ctx, const void* x, DType x_dtype, const void* weight, DType w_dtype, void* y,
              DType y_dtype, int64_t rows, int64_t cols, float eps) {
  check_rows("rms_norm", rows, cols);
  if (rows == 0) return;
  dispatch_float3("rms_norm", x_dtype, "x", w_dtype, "weight", y_dtype, "y",
                  [&](auto a, auto b, auto c) {
    using TX = decltype(a);
    using TW = decltype(b);
    using TY = decltype(c);
    rms_norm_kernel<TX, TW, TY><<<grid_for_rows(rows), kThreads, 0, ctx.stream>>>(
        static_cast<const TX*>(x), static_cast<const TW*>(weight), static_cast<TY*>(y), rows,
        static_cast<int>(cols), eps);
  });
  ctx.launched("rms_norm");
}

void layer_norm_modulate(const CudaContext& ctx, const void* x, DType x_dtype, const void* shift,
                         DType shift_dtype, const void* scale, DType scale_dtype, void* y, DType y_dtype,
                         int64_t rows, int64_t cols, float eps) {
  check_rows("layer_norm_modulate", rows, cols);
  if (shift_dtype != scale_dtype)
    fail(cat("layer_norm_modulate: shift (", dtype_name(shift_dtype), ") and scale (", dtype_name(scale_dtype),
             ") must have one dtype"));
  if (rows == 0) return;
  dispatch_float3("layer_norm_modulate", x_dtype, "x", shift_dtype, "shift and scale", y_dtype, "y",
                  [&](auto a, auto b, auto c) {
    using TX = decltype(a);
    using TS = decltype(b);
    using TY = decltype(c);
    layer_norm_modulate_kernel<TX, TS, TY><<<grid_for_rows(rows), kThreads, 0, ctx.stream>>>(
        static_cast<const TX*>(x), static_cast<const TS*>(shift), static_cast<const TS*>(scale),
        static_cast<TY*>(y), rows, static_cast<int>(cols), eps);
  });
  ctx.launched("layer_norm_modulate");
}

void l2_normalize(const CudaContext& ctx, const void* x, DType x_dtype, const void* gamma, DType g_dtype, void* y,
                  DType y_dtype, int64_t rows, int64_t cols, float scale) {
  check_rows("l2_normalize", rows, cols);
  if (rows == 0) return;
  dispatch_float3("l2_normalize", x_dtype, "x", g_dtype, "gamma", y_dtype, "y",
                  [&](auto a, auto b, auto c) {
    using TX = decltype(a);
    using TG = decltype(b);
    using TY = decltype(c);
    l2_normalize_kernel<TX, TG, TY><<<grid_for_rows(rows), kThreads, 0, ctx.stream>>>(
        static_cast<const TX*>(x), static_cast<const TG*>(gamma), static_cast<TY*>(y), rows,
        static_cast<int>(cols), scale);
  });
  ctx.launched("l2_normalize");
}

void row_norms(const CudaContext& ctx, const void* x, DType dtype, float* out, int64_t rows, int64_t cols) {
  check_rows("row_norms", rows, cols);
  if (rows == 0) return;
  dispatch_float(dtype, "row_norms", "x", [&](auto t) {
    using T = decltype(t);
    row_norms_kernel<T><<<grid_for_rows(rows), kThreads, 0, ctx.stream>>>(static_cast<const T*>(x), out, rows,
                                                                          static_cast<int>(cols));
  });
  ctx.launched("row_norms");
}

void gated_add_layer_norm_modulate(const CudaContext& ctx, float* x, const void* gate, const void* y, DType y_dtype,
                                   const void* shift, const void* scale, DType mod_dtype, void* out, DType out_dtype,
                                   int64_t rows, int64_t cols, float eps) {
  const char* op = "gated_add_layer_norm_modulate_";
  check_rows(op, rows, cols);
  if (rows == 0) return;
  dispatch_float3(op, mod_dtype, "gate, shift and scale", y_dtype, "y", out_dtype, "out",
                  [&](auto a, auto b, auto c) {
    using TM = decltype(a);
    using TY = decltype(b);
    using TO = decltype(c);
    gated_add_layer_norm_modulate_kernel<TM, TY, TO><<<grid_for_rows(rows), kThreads, 0, ctx.stream>>>(
        x, static_cast<const TM*>(gate), static_cast<const TY*>(y), static_cast<const TM*>(shift),
        static_cast<const TM*>(scale), static_cast<TO*>(out), rows, static_cast<int>(cols), eps);
  });
  ctx.launched(op);
}

void rms_norm_rope(const CudaContext& ctx, const void* proj, DType proj_dtype, const void* weight, DType w_dtype,
                   const float* cos, const float* sin, void* out, DType out_dtype, int64_t tokens, int64_t H,
                   int64_t Dh, float eps) {
  const char* op = "rms_norm_rope";
  if (tokens < 0 || H <= 0 || Dh <= 0 || Dh % 2 != 0 || Dh > 4096)
    fail(cat(op, ": tokens ", tokens, " H ", H, " Dh ", Dh, " (Dh must be even)"));
  const int64_t head_rows = tokens * H;
  if (head_rows == 0) return;
  dispatch_float3(op, proj_dtype, "proj", w_dtype, "weight", out_dtype, "dst",
                  [&](auto a, auto b, auto c) {
    using TP = decltype(a);
    using TW = decltype(b);
    using TO = decltype(c);
    rms_norm_rope_kernel<TP, TW, TO><<<grid_for_rows(head_rows), kThreads, 0, ctx.stream>>>(
        static_cast<const TP*>(proj), static_cast<const TW*>(weight), cos, sin, static_cast<TO*>(out), head_rows,
        H, static_cast<int>(Dh / 2), eps);
  });
  ctx.launched(op);
}


}  // namespace ditbatch::cuda
