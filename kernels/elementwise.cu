// Element-wise kernels: dtype conversion, activations, residual adds (and adds and divisions by a
// row vector), clamp, axpy, the uint8 image and the count of non-finite values.
// Arithmetic is fp32 whatever the storage type; where the CPU reference rounds each product
// (x + g * y, x + dt * v) the kernels do too (__fmul_rn / __fadd_rn: no FMA contraction), so
// f32 runs agree with it bit for bit.
#include <math_constants.h>

#include "device_utils.cuh"
#include "launch.h"

namespace ditbatch::cuda {

// ---------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------

template <typename TS, typename TD>
__global__ void convert_kernel(const TS* __restrict__ src, TD* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = from_f<TD>(to_f(src[i]));
}

__device__ __forceinline__ float silu_f(float v) { return v / (1.0f + expf(-v)); }

template <typename T>
__global__ void silu_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = from_f<T>(silu_f(to_f(x[i])));
}

// torch's GELU(approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <typename T>
__global__ void gelu_tanh_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  const float beta = 0.7978845608028654f, kappa = 0.044715f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = to_f(x[i]);
    const float inner = beta * (v + kappa * (v * v * v));
    y[i] = from_f<T>(0.5f * v * (1.0f + tanhf(inner)));
  }
}

// torch's exact GELU: x * 0.5 * (1 + erf(x * sqrt(1/2)))
template <typename T>
__global__ void gelu_erf_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  const float sqrt_half = 0.7071067811865476f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = to_f(x[i]);
    y[i] = from_f<T>(v * 0.5f * (1.0f + erff(v * sqrt_half)));
  }
}

template <typename TG, typename TU>
__global__ void silu_mul_kernel(const TG* __restrict__ gate, const TU* __restrict__ up, TG* __restrict__ y,
                                int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = from_f<TG>(__fmul_rn(silu_f(to_f(gate[i])), to_f(up[i])));
}

template <typename TX, typename TY>
__global__ void add_kernel(TX* __restrict__ x, const TY* __restrict__ y, int64_t n, int64_t y_period) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = from_f<TX>(__fadd_rn(to_f(x[i]), to_f(y[y_period == n ? i : i % y_period])));
}

template <typename TX, typename TG, typename TY>
__global__ void gated_add_kernel(TX* __restrict__ x, const TG* __restrict__ gate, const TY* __restrict__ y,
                                 int64_t n, int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = from_f<TX>(__fadd_rn(to_f(x[i]), __fmul_rn(to_f(gate[i % cols]), to_f(y[i]))));
}

template <typename T>
__global__ void clamp_kernel(T* __restrict__ x, int64_t n, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float v = to_f(x[i]);
    v = v < lo ? lo : v;  // comparisons, not fminf/fmaxf: a NaN must survive to be reported
    v = hi < v ? hi : v;
    x[i] = from_f<T>(v);
  }
}

template <typename TY>
__global__ void axpy_kernel(float* __restrict__ x, float alpha, const TY* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = __fadd_rn(x[i], __fmul_rn(alpha, to_f(y[i])));
}

__global__ void div_kernel(float* __restrict__ x, const float* __restrict__ y, int64_t n, int64_t y_period) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = __fdiv_rn(x[i], y[y_period == n ? i : i % y_period]);
}

__global__ void scale_rows_kernel(float* __restrict__ x, const float* __restrict__ s, int64_t n, int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = __fmul_rn(x[i], s[i / cols]);
}

__global__ void scale_shift_kernel(float* __restrict__ x, float scale, float shift, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = __fadd_rn(__fmul_rn(x[i], scale), shift);
}

// Rounded half to even (rintf, as numpy's round), saturated.
__global__ void to_u8_kernel(const float* __restrict__ x, uint8_t* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float v = x[i];
    v = v < 0.0f ? 0.0f : v;  // a NaN passes both comparisons and becomes 0 below
    v = 255.0f < v ? 255.0f : v;
    out[i] = v == v ? static_cast<uint8_t>(rintf(v)) : uint8_t{0};
  }
}

// Sum of the block's per-thread counts (kThreads threads), in shared memory: thread 0 gets it.
__device__ int64_t block_sum(int64_t v) {
  __shared__ int64_t sums[kThreads];
  sums[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  return sums[0];
}

// Stage 1: each block counts its grid-stride share into partial[blockIdx.x]. No atomics, so the
// count is the same whatever the order blocks run in (it is an integer either way).
template <typename T>
__global__ void count_nonfinite_kernel(const T* __restrict__ x, int64_t n, int64_t* __restrict__ partial) {
  int64_t count = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    count += !(fabsf(to_f(x[i])) < CUDART_INF_F);  // NaN fails every comparison
  const int64_t total = block_sum(count);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// Stage 2: one block adds the partial counts.
__global__ void sum_counts_kernel(const int64_t* __restrict__ partial, int64_t blocks, int64_t* __restrict__ out) {
  int64_t count = 0;
  for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) count += partial[b];
  const int64_t total = block_sum(count);
  if (threadIdx.x == 0) *out = total;
}

// ---------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------

namespace {
void check_count(const char* op, int64_t n) {
  if (n < 0) fail(cat(op, ": negative element count ", n));
}
// y repeats every y_period elements of x: n (same shape) or x's row length (a row vector).
void check_period(const char* op, int64_t n, int64_t y_period) {
  if (y_period <= 0 || n % y_period != 0) fail(cat(op, ": y period ", y_period, " for ", n, " elements"));
}
}  // namespace

void convert(const CudaContext& ctx, const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  check_count("convert", n);
  if (n == 0) return;
  if (src_dtype == dst_dtype && is_float(src_dtype)) {
    check(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype), cudaMemcpyDeviceToDevice,
                          ctx.stream),
          "convert: device copy");
    return;
  }
  dispatch_float(src_dtype, "convert", "the source", [&](auto s) {
    using TS = decltype(s);
    dispatch_float(dst_dtype, "convert", "the destination", [&](auto d) {
      using TD = decltype(d);
      convert_kernel<TS, TD><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(static_cast<const TS*>(src),
                                                                           static_cast<TD*>(dst), n);
    });
  });
  ctx.launched("convert");
}

void silu(const CudaContext& ctx, const void* x, void* y, DType dtype, int64_t n) {
  check_count("silu", n);
  if (n == 0) return;
  dispatch_float(dtype, "silu", "x", [&](auto t) {
    using T = decltype(t);
    silu_kernel<T><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n);
  });
  ctx.launched("silu");
}

void gelu_tanh(const CudaContext& ctx, const void* x, void* y, DType dtype, int64_t n) {
  check_count("gelu_tanh", n);
  if (n == 0) return;
  dispatch_float(dtype, "gelu_tanh", "x", [&](auto t) {
    using T = decltype(t);
    gelu_tanh_kernel<T><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                                        n);
  });
  ctx.launched("gelu_tanh");
}

void gelu_erf(const CudaContext& ctx, const void* x, void* y, DType dtype, int64_t n) {
  check_count("gelu_erf", n);
  if (n == 0) return;
  dispatch_float(dtype, "gelu_erf", "x", [&](auto t) {
    using T = decltype(t);
    gelu_erf_kernel<T><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n);
  });
  ctx.launched("gelu_erf");
}

void silu_mul(const CudaContext& ctx, const void* gate, DType gate_dtype, const void* up, DType up_dtype, void* y,
              int64_t n) {
  check_count("silu_mul", n);
  if (n == 0) return;
  dispatch_float(gate_dtype, "silu_mul", "gate", [&](auto g) {
    using TG = decltype(g);
    dispatch_float(up_dtype, "silu_mul", "up", [&](auto u) {
      using TU = decltype(u);
      silu_mul_kernel<TG, TU><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(
          static_cast<const TG*>(gate), static_cast<const TU*>(up), static_cast<TG*>(y), n);
    });
  });
  ctx.launched("silu_mul");
}

void add_inplace(const CudaContext& ctx, void* x, DType x_dtype, const void* y, DType y_dtype, int64_t n,
                 int64_t y_period) {
  check_count("add_", n);
  if (n == 0) return;
  check_period("add_", n, y_period);
  dispatch_float(x_dtype, "add_", "x", [&](auto a) {
    using TX = decltype(a);
    dispatch_float(y_dtype, "add_", "y", [&](auto b) {
      using TY = decltype(b);
      add_kernel<TX, TY><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(static_cast<TX*>(x),
                                                                         static_cast<const TY*>(y), n, y_period);
    });
  });
  ctx.launched("add_");
}

void gated_add_inplace(const CudaContext& ctx, void* x, DType x_dtype, const void* gate, DType gate_dtype,
                       const void* y, DType y_dtype, int64_t rows, int64_t cols) {
  if (rows < 0 || cols <= 0) fail(cat("gated_add_: rows ", rows, " cols ", cols));
  const int64_t n = rows * cols;
  if (n == 0) return;
  dispatch_float3("gated_add_", x_dtype, "x", gate_dtype, "gate", y_dtype, "y",
                  [&](auto a, auto g, auto b) {
    using TX = decltype(a);
    using TG = decltype(g);
    using TY = decltype(b);
    gated_add_kernel<TX, TG, TY><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(
        static_cast<TX*>(x), static_cast<const TG*>(gate), static_cast<const TY*>(y), n, cols);
  });
  ctx.launched("gated_add_");
}

void clamp_inplace(const CudaContext& ctx, void* x, DType dtype, int64_t n, float lo, float hi) {
  check_count("clamp_", n);
  if (n == 0) return;
  dispatch_float(dtype, "clamp_", "x", [&](auto t) {
    using T = decltype(t);
    clamp_kernel<T><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(static_cast<T*>(x), n, lo, hi);
  });
  ctx.launched("clamp_");
}

void axpy_inplace(const CudaContext& ctx, float* x, float alpha, const void* y, DType y_dtype, int64_t n) {
  check_count("axpy_", n);
  if (n == 0) return;
  dispatch_float(y_dtype, "axpy_", "y", [&](auto t) {
    using TY = decltype(t);
    axpy_kernel<TY><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(x, alpha, static_cast<const TY*>(y), n);
  });
  ctx.launched("axpy_");
}

void div_inplace(const CudaContext& ctx, float* x, const float* y, int64_t n, int64_t y_period) {
  check_count("div_", n);
  if (n == 0) return;
  check_period("div_", n, y_period);
  div_kernel<<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(x, y, n, y_period);
  ctx.launched("div_");
}

void scale_rows_inplace(const CudaContext& ctx, float* x, const float* s, int64_t rows, int64_t cols) {
  check_count("scale_rows_", rows);
  check_count("scale_rows_", cols);
  const int64_t n = rows * cols;
  if (n == 0) return;
  scale_rows_kernel<<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(x, s, n, cols);
  ctx.launched("scale_rows_");
}

void scale_shift_inplace(const CudaContext& ctx, float* x, float scale, float shift, int64_t n) {
  check_count("scale_shift_", n);
  if (n == 0) return;
  scale_shift_kernel<<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(x, scale, shift, n);
  ctx.launched("scale_shift_");
}

void to_u8(const CudaContext& ctx, const float* x, uint8_t* out, int64_t n) {
  check_count("to_u8", n);
  if (n == 0) return;
  to_u8_kernel<<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(x, out, n);
  ctx.launched("to_u8");
}

void count_nonfinite(const CudaContext& ctx, const void* x, DType dtype, int64_t n, int64_t* count) {
  check_count("count_nonfinite", n);
  const unsigned blocks = grid_for(ctx, n);
  // Freed when this returns: the stream runs both kernels before any later user of the block.
  DeviceBlock partial = ctx.scratch(blocks * sizeof(int64_t), "count_nonfinite: per-block counts");
  dispatch_float(dtype, "count_nonfinite", "x", [&](auto t) {
    using T = decltype(t);
    count_nonfinite_kernel<T><<<blocks, kThreads, 0, ctx.stream>>>(static_cast<const T*>(x), n,
                                                                   static_cast<int64_t*>(partial.get()));
  });
  ctx.launched("count_nonfinite");
  sum_counts_kernel<<<1, kThreads, 0, ctx.stream>>>(static_cast<const int64_t*>(partial.get()), blocks, count);
  ctx.launched("count_nonfinite (sum)");
}

}  // namespace ditbatch::cuda
