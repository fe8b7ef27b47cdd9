// Gathers and resampling: embedding rows, nearest x2 upsampling, the im2col of a 3x3
// convolution (NHWC; stride 1 with zero padding 1, or stride 2 padded after the image only),
// whose column order (ky, kx, cin) matches the weights, and the permutation of a tensor's axes.
#include "device_utils.cuh"
#include "launch.h"

namespace ditbatch::cuda {

// ---------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------

template <typename T>
__global__ void embedding_kernel(const T* __restrict__ table, const int64_t* __restrict__ ids,
                                 float* __restrict__ out, int64_t n, int64_t D) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = to_f(table[ids[i / D] * D + i % D]);
}

template <typename T>
__global__ void upsample2x_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, int64_t W, int64_t C) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = i % C, pixel = i / C, ox = pixel % (2 * W), oy = pixel / (2 * W);
    y[i] = x[((oy / 2) * W + ox / 2) * C + c];
  }
}

template <typename T>
__global__ void im2col3x3_kernel(const T* __restrict__ x, T* __restrict__ col, int64_t n, Conv3x3Geometry g,
                                 int64_t y0) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ci = i % g.Cin, t = i / g.Cin, tap = t % 9, pixel = t / 9;
    const int64_t oy = y0 + pixel / g.Wo, ox = pixel % g.Wo;
    const int64_t iy = oy * g.stride + tap / 3 - g.pad, ix = ox * g.stride + tap % 3 - g.pad;
    col[i] = (iy >= 0 && iy < g.H && ix >= 0 && ix < g.W) ? x[(iy * g.W + ix) * g.Cin + ci] : from_f<T>(0.0f);
  }
}

// The permutation's sizes travel by value as kernel arguments.
struct PermuteDims {
  int64_t out_shape[kMaxPermuteRank];
  int64_t in_strides[kMaxPermuteRank];
  int rank;
};

// One thread per output element, so the writes are coalesced; T is an unsigned integer of the
// element's size (the bytes move unchanged whatever the dtype).
template <typename T>
__global__ void permute_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t n, PermuteDims d) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = e, src = 0;
    for (int k = d.rank - 1; k >= 0; --k) {
      src += (rest % d.out_shape[k]) * d.in_strides[k];
      rest /= d.out_shape[k];
    }
    out[e] = x[src];
  }
}

// ---------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------

void embedding(const CudaContext& ctx, const void* table, DType table_dtype, const int64_t* ids, float* out,
               int64_t L, int64_t D) {
  if (L < 0 || D <= 0) fail(cat("embedding: L ", L, " D ", D));
  const int64_t n = L * D;
  if (n == 0) return;
  dispatch_float(table_dtype, "embedding", "table", [&](auto t) {
    using T = decltype(t);
    embedding_kernel<T><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(static_cast<const T*>(table), ids, out, n, D);
  });
  ctx.launched("embedding");
}

void upsample_nearest2x(const CudaContext& ctx, const void* x, void* y, DType dtype, int64_t H, int64_t W, int64_t C) {
  if (H < 0 || W < 0 || C <= 0) fail(cat("upsample_nearest2x: H ", H, " W ", W, " C ", C));
  const int64_t n = 4 * H * W * C;
  if (n == 0) return;
  dispatch_float(dtype, "upsample_nearest2x", "x", [&](auto t) {
    using T = decltype(t);
    upsample2x_kernel<T><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                                         n, W, C);
  });
  ctx.launched("upsample_nearest2x");
}

void im2col3x3(const CudaContext& ctx, const void* x, void* col, DType dtype, const Conv3x3Geometry& g, int64_t y0,
               int64_t rows) {
  const char* op = g.stride == 1 ? "conv2d_3x3" : "conv2d_3x3_stride2";
  if (g.H <= 0 || g.W <= 0 || g.Cin <= 0 || g.stride < 1 || g.pad < 0 || g.Wo <= 0 || y0 < 0 || rows <= 0 ||
      y0 + rows > g.Ho || (g.Ho - 1) * g.stride + 2 - g.pad > g.H || (g.Wo - 1) * g.stride + 2 - g.pad > g.W)
    fail(cat(op, " (im2col): H ", g.H, " W ", g.W, " Cin ", g.Cin, " stride ", g.stride, " pad ", g.pad, " -> ", g.Ho,
             "x", g.Wo, " rows [", y0, ", ", y0 + rows, ")"));
  const int64_t n = rows * g.Wo * 9 * g.Cin;
  dispatch_float(dtype, op, "x", [&](auto t) {
    using T = decltype(t);
    im2col3x3_kernel<T><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(static_cast<const T*>(x), static_cast<T*>(col),
                                                                        n, g, y0);
  });
  ctx.launched(g.stride == 1 ? "conv2d_3x3 (im2col)" : "conv2d_3x3_stride2 (im2col)");
}

void permute(const CudaContext& ctx, const void* x, void* out, size_t elem_size, const int64_t* out_shape,
             const int64_t* in_strides, int rank) {
  if (rank < 1 || rank > kMaxPermuteRank) fail(cat("permute: rank ", rank, " (expected 1 to ", kMaxPermuteRank, ")"));
  PermuteDims d{};
  d.rank = rank;
  int64_t n = 1;
  for (int k = 0; k < rank; ++k) {
    if (out_shape[k] < 0 || in_strides[k] < 0) fail(cat("permute: dim ", k, " size ", out_shape[k], " stride ", in_strides[k]));
    d.out_shape[k] = out_shape[k];
    d.in_strides[k] = in_strides[k];
    n *= out_shape[k];
  }
  if (n == 0) return;
  auto launch = [&](auto t) {
    using T = decltype(t);
    permute_kernel<T><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(static_cast<const T*>(x), static_cast<T*>(out),
                                                                       n, d);
  };
  switch (elem_size) {
    case 1: launch(uint8_t{}); break;
    case 2: launch(uint16_t{}); break;
    case 4: launch(uint32_t{}); break;
    default: fail(cat("permute: element size ", elem_size, " (expected 1, 2 or 4)"));
  }
  ctx.launched("permute");
}

}  // namespace ditbatch::cuda
