// Gathers and resampling: embedding rows, nearest x2 upsampling, the im2col of a 3x3
// convolution (NHWC, zero padding 1), whose column order (ky, kx, cin) matches the weights, and
// the sampler's 2x2 latent packing both ways (unpacking fused with the VAE's de-normalisation).
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
__global__ void im2col3x3_kernel(const T* __restrict__ x, T* __restrict__ col, int64_t n, int64_t H, int64_t W,
                                 int64_t Cin, int64_t y0) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ci = i % Cin, t = i / Cin, tap = t % 9, pixel = t / 9;
    const int64_t oy = y0 + pixel / W, ox = pixel % W;
    const int64_t iy = oy + tap / 3 - 1, ix = ox + tap % 3 - 1;
    col[i] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? x[(iy * W + ix) * Cin + ci] : from_f<T>(0.0f);
  }
}

// One thread per packed element, so the writes are coalesced: packed[t, c*4 + dy*2 + dx] for
// token t = (i, j) reads x[c, 2i + dy, 2j + dx].
__global__ void pack_latents_kernel(const float* __restrict__ x, float* __restrict__ packed, int64_t n, int64_t C,
                                    int64_t h, int64_t w) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t k = e % (4 * C), token = e / (4 * C);
    const int64_t c = k / 4, dy = (k / 2) % 2, dx = k % 2, i = token / w, j = token % w;
    packed[e] = x[(c * 2 * h + 2 * i + dy) * 2 * w + 2 * j + dx];
  }
}

// One thread per NHWC output element: z[y, x, c] = packed[(y/2, x/2), c*4 + (y%2)*2 + x%2] / divisor[c]
// + mean[c], each operation rounded in f32 as diffusers does it.
template <typename T>
__global__ void unpack_latents_kernel(const float* __restrict__ packed, const float* __restrict__ divisor,
                                      const float* __restrict__ mean, T* __restrict__ z, int64_t n, int64_t C,
                                      int64_t w) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = e % C, pixel = e / C, x = pixel % (2 * w), y = pixel / (2 * w);
    const float latent = packed[((y / 2) * w + x / 2) * 4 * C + c * 4 + (y % 2) * 2 + x % 2];
    z[e] = from_f<T>(__fadd_rn(__fdiv_rn(latent, divisor[c]), mean[c]));
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

void im2col3x3(const CudaContext& ctx, const void* x, void* col, DType dtype, int64_t H, int64_t W, int64_t Cin,
               int64_t y0, int64_t rows) {
  if (H <= 0 || W <= 0 || Cin <= 0 || y0 < 0 || rows <= 0 || y0 + rows > H)
    fail(cat("conv2d_3x3 (im2col): H ", H, " W ", W, " Cin ", Cin, " rows [", y0, ", ", y0 + rows, ")"));
  const int64_t n = rows * W * 9 * Cin;
  dispatch_float(dtype, "conv2d_3x3", "x", [&](auto t) {
    using T = decltype(t);
    im2col3x3_kernel<T><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(static_cast<const T*>(x), static_cast<T*>(col),
                                                                        n, H, W, Cin, y0);
  });
  ctx.launched("conv2d_3x3 (im2col)");
}

void pack_latents(const CudaContext& ctx, const float* x, float* packed, int64_t C, int64_t h, int64_t w) {
  if (C <= 0 || h <= 0 || w <= 0) fail(cat("pack_latents: C ", C, " h ", h, " w ", w));
  const int64_t n = 4 * C * h * w;
  pack_latents_kernel<<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(x, packed, n, C, h, w);
  ctx.launched("pack_latents");
}

void unpack_latents(const CudaContext& ctx, const float* packed, const float* divisor, const float* mean, void* z,
                    DType z_dtype, int64_t C, int64_t h, int64_t w) {
  if (C <= 0 || h <= 0 || w <= 0) fail(cat("unpack_latents: C ", C, " h ", h, " w ", w));
  const int64_t n = 4 * C * h * w;
  dispatch_float(z_dtype, "unpack_latents", "z", [&](auto t) {
    using T = decltype(t);
    unpack_latents_kernel<T><<<grid_for(ctx, n), kThreads, 0, ctx.stream>>>(packed, divisor, mean,
                                                                             static_cast<T*>(z), n, C, w);
  });
  ctx.launched("unpack_latents");
}

}  // namespace ditbatch::cuda
