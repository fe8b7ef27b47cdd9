// The launchers of the hand-written kernels (C++17). Each states its contract, checks it,
// launches on ctx.stream and checks the launch. Pointers are device pointers to dense
// row-major data; dtypes are f32 or bf16 unless a comment says otherwise. CudaBackend
// (cuda_backend.cpp) checks shapes against the Backend's conventions before calling these.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "cuda_context.h"

namespace ditbatch::cuda {

// ---- elementwise.cu ----
// dst[i] = src[i] converted (f32 <-> bf16, or a copy).
void convert(const CudaContext& ctx, const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);
void silu(const CudaContext& ctx, const void* x, void* y, DType dtype, int64_t n);
void gelu_tanh(const CudaContext& ctx, const void* x, void* y, DType dtype, int64_t n);
// y = 0.5 x (1 + erf(x / sqrt(2))) (torch's exact GELU), computed in f32.
void gelu_erf(const CudaContext& ctx, const void* x, void* y, DType dtype, int64_t n);
// y = silu(gate) * up; y has gate's dtype.
void silu_mul(const CudaContext& ctx, const void* gate, DType gate_dtype, const void* up, DType up_dtype, void* y,
              int64_t n);
// x[i] += y[i % y_period]: y_period = n (same shape) or the row length (a row vector)
void add_inplace(const CudaContext& ctx, void* x, DType x_dtype, const void* y, DType y_dtype, int64_t n,
                 int64_t y_period);
// x[r, c] += gate[c] * y[r, c]
void gated_add_inplace(const CudaContext& ctx, void* x, DType x_dtype, const void* gate, DType gate_dtype,
                       const void* y, DType y_dtype, int64_t rows, int64_t cols);
// x = min(max(x, lo), hi), NaN stays NaN.
void clamp_inplace(const CudaContext& ctx, void* x, DType dtype, int64_t n, float lo, float hi);
// x (f32) += alpha * y
void axpy_inplace(const CudaContext& ctx, float* x, float alpha, const void* y, DType y_dtype, int64_t n);
// x[i] (f32) /= y[i % y_period] (f32): y_period as for add_inplace
void div_inplace(const CudaContext& ctx, float* x, const float* y, int64_t n, int64_t y_period);
// x (f32) [rows, cols]: row r *= s[r] (f32)
void scale_rows_inplace(const CudaContext& ctx, float* x, const float* s, int64_t rows, int64_t cols);
// x (f32) = x * scale + shift
void scale_shift_inplace(const CudaContext& ctx, float* x, float scale, float shift, int64_t n);
// out (u8) [n] = round_half_even(x) saturated to [0, 255] (x f32); NaN -> 0
void to_u8(const CudaContext& ctx, const float* x, uint8_t* out, int64_t n);
// *count (one device int64) = how many of x[0, n) are NaN or +-Inf (two launches, scratch from ctx)
void count_nonfinite(const CudaContext& ctx, const void* x, DType dtype, int64_t n, int64_t* count);

// ---- norm.cu (one warp per row) ----
// y = x / sqrt(mean(x^2) + eps) * weight
void rms_norm(const CudaContext& ctx, const void* x, DType x_dtype, const void* weight, DType w_dtype, void* y,
              DType y_dtype, int64_t rows, int64_t cols, float eps);
// y = LN(x) * (1 + scale) + shift, LN without affine
void layer_norm_modulate(const CudaContext& ctx, const void* x, DType x_dtype, const void* shift,
                         DType shift_dtype, const void* scale, DType scale_dtype, void* y, DType y_dtype,
                         int64_t rows, int64_t cols, float eps);
// y = x / max(||x||, 1e-12) * scale * gamma
void l2_normalize(const CudaContext& ctx, const void* x, DType x_dtype, const void* gamma, DType g_dtype, void* y,
                  DType y_dtype, int64_t rows, int64_t cols, float scale);
// out (f32) [rows] = ||x_r||, summed in double
void row_norms(const CudaContext& ctx, const void* x, DType dtype, float* out, int64_t rows, int64_t cols);
// x (f32) += gate * y, then out = LN(x) * (1 + scale) + shift; gate, shift, scale [cols] of mod_dtype.
void gated_add_layer_norm_modulate(const CudaContext& ctx, float* x, const void* gate, const void* y, DType y_dtype,
                                   const void* shift, const void* scale, DType mod_dtype, void* out, DType out_dtype,
                                   int64_t rows, int64_t cols, float eps);
// Per (token, head) of proj [tokens, H, Dh]: RMSNorm with weight [Dh], then interleaved RoPE with
// cos, sin f32 [tokens, Dh/2]; out [tokens, H, Dh] (a row block of the joint Q or K).
void rms_norm_rope(const CudaContext& ctx, const void* proj, DType proj_dtype, const void* weight, DType w_dtype,
                   const float* cos, const float* sin, void* out, DType out_dtype, int64_t tokens, int64_t H,
                   int64_t Dh, float eps);

// ---- rope.cu ----
// In place on x [L, H, Dh]; cos, sin f32 [L, Dh/2]. interleaved: pairs (2m, 2m+1); else NeoX (m, m + Dh/2).
void rope_inplace(const CudaContext& ctx, void* x, DType dtype, const float* cos, const float* sin, int64_t L,
                  int64_t H, int64_t Dh, bool interleaved);

// ---- gather.cu ----
// out (f32) [L, D] = table[ids[i]]; ids: device int64, already range-checked.
void embedding(const CudaContext& ctx, const void* table, DType table_dtype, const int64_t* ids, float* out,
               int64_t L, int64_t D);
// [H, W, C] -> [2H, 2W, C], same dtype
void upsample_nearest2x(const CudaContext& ctx, const void* x, void* y, DType dtype, int64_t H, int64_t W, int64_t C);
// Where a 3x3 convolution's output pixels read x [H, W, Cin]: output (oy, ox) reads input row
// oy * stride + ky - pad (ky in 0..2), likewise for columns, zero outside x; Ho x Wo outputs.
// conv2d_3x3: stride 1, pad 1, Ho = H, Wo = W. conv2d_3x3_stride2: stride 2, pad 0 (the zero
// row and column after the image are the taps past x), Ho = H / 2, Wo = W / 2.
struct Conv3x3Geometry {
  int64_t H = 0, W = 0, Cin = 0, stride = 1, pad = 1, Ho = 0, Wo = 0;
};
// col [rows * Wo, 9 * Cin] for output rows [y0, y0 + rows) of the convolution g of x.
void im2col3x3(const CudaContext& ctx, const void* x, void* col, DType dtype, const Conv3x3Geometry& g, int64_t y0,
               int64_t rows);
// out = x.permute(dims) for elements of elem_size bytes (1, 2 or 4): out_shape[k] =
// x's dim dims[k], in_strides[k] = x's element stride along that dim; rank 1 to kMaxPermuteRank.
constexpr int kMaxPermuteRank = 6;
void permute(const CudaContext& ctx, const void* x, void* out, size_t elem_size, const int64_t* out_shape,
             const int64_t* in_strides, int rank);

// ---- attention.cu ----
// q [Lq, H, Dh], k and v [Lk, Hkv, Dh], o [Lq, H, Dh], all of one dtype.
struct AttentionShape {
  int64_t Lq = 0, Lk = 0, H = 0, Hkv = 0, Dh = 0;
  float scale = 1.0f;
  bool causal = false;
};
// Our own flash-style kernel: online softmax in fp32, CUDA cores; Dh <= 384.
void attention_flash(const CudaContext& ctx, const void* q, const void* k, const void* v, void* o, DType dtype,
                     const AttentionShape& s);
constexpr int64_t kFlashMaxHeadDim = 384;
// Materialised: S = scale Q K^T (cuBLASLt, f32), a softmax kernel writes P (dtype), O = P V
// (cuBLASLt); query rows in chunks so that S and P stay under ~1 GiB (and at most
// ctx.attention_chunk_rows rows where set). Any Dh. Returns the number of chunks.
int64_t attention_gemm(const CudaContext& ctx, const void* q, const void* k, const void* v, void* o, DType dtype,
                       const AttentionShape& s);
// The real lengths of a padded cuDNN SDPA call, as its two int32 device tensors want them:
// Lq at lengths[0], Lk at lengths[kSeqLenStride] (each tensor 16-byte aligned).
constexpr int64_t kSeqLenStride = 4;
void set_sequence_lengths(const CudaContext& ctx, int32_t* lengths, int64_t Lq, int64_t Lk);

}  // namespace ditbatch::cuda
