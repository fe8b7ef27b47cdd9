// The shape contract of the Backend ops, checked in one place. Each backend checks what is its
// own (device, dtypes), then calls the op's function here, so a wrong shape fails with the same
// message on every backend: the op's name, what it got and what it expected.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace ditbatch::op_shapes {

// The GEMM sizes of y[M, N] = x[M, K] w[N, K]^T.
struct LinearDims {
  int64_t M = 0, N = 0, K = 0;
};

void same_shape(const char* op, const Tensor& a, const Tensor& b);
// A vector of x.cols() values applied to every row of x (norm weights, gates, shift/scale).
void row_vector(const char* op, const Tensor& x, const Tensor& v, const char* what);
// A vector of x.rows() values, one for each row of x (a per-row scale), x of rank 1 or more.
void per_row(const char* op, const Tensor& x, const Tensor& v, const char* what);
// x has rows: rank 1 or more.
void has_rows(const char* op, const Tensor& x);
// src fits rows [row, row + src.rows) of dst, with the same number of columns.
void rows_into(const char* op, const Tensor& dst, int64_t row, const Tensor& src);

LinearDims linear(const char* op, const Tensor& x, const Tensor& w, const Tensor* bias);
// linear() whose result lands in rows [row, row + M) of dst.
LinearDims linear_into(const char* op, const Tensor& dst, int64_t row, const Tensor& x, const Tensor& w,
                       const Tensor& bias);
void conv2d_3x3(const Tensor& x, const Tensor& w, const Tensor& bias);
void attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal);
// attention() whose [Lq, H * Dh] result lands in rows [row, row + Lq) of dst.
void attention_into(const Tensor& dst, int64_t row, const Tensor& q, const Tensor& k, const Tensor& v, bool causal);
void rope(const char* op, const Tensor& x, const Tensor& cos, const Tensor& sin);
// Per-head RMSNorm + RoPE of proj [tokens, H * Dh] into rows of dst: returns H.
int64_t rms_norm_rope_into(const Tensor& dst, int64_t row, const Tensor& proj, const Tensor& weight,
                           const Tensor& cos, const Tensor& sin);
// table [V, D], host i64 ids [L], every id inside the table (a bad id is the user's input).
void embedding(const Tensor& table, const Tensor& ids);
void image_hwc(const char* op, const Tensor& x);  // one NHWC image [H, W, C]

// The latent grid of one image: C channels, (h, w) tokens of 2x2 latent pixels.
struct LatentGrid {
  int64_t channels = 0, h = 0, w = 0;
};
// x [C, 2h, 2w] with both sides even and positive.
LatentGrid pack_latents(const Tensor& x);
// packed [h * w, 4C] with h, w > 0, divisor and mean [C]: returns C.
int64_t unpack_latents(const Tensor& packed, int64_t h, int64_t w, const Tensor& divisor, const Tensor& mean);

}  // namespace ditbatch::op_shapes
