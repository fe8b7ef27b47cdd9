// The shape contract of the Backend ops, checked in one place. Each backend checks what is its
// own (device, dtypes), then calls the op's function here, so a wrong shape fails with the same
// message on every backend: the op's name, what it got and what it expected.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ditbatch::op_shapes {

// The GEMM sizes of y[M, N] = x[M, K] w[N, K]^T.
struct LinearDims {
  int64_t M = 0, N = 0, K = 0;
};

void same_shape(const char* op, const Tensor& a, const Tensor& b);
// y has x's shape (returns false) or is a row vector of x.cols() values (returns true: broadcast).
bool same_shape_or_row_vector(const char* op, const Tensor& x, const Tensor& y);
// A vector of x.cols() values applied to every row of x (norm weights, gates, shift/scale).
void row_vector(const char* op, const Tensor& x, const Tensor& v, const char* what);
// A vector of x.rows() values, one for each row of x (a per-row scale), x of rank 1 or more.
void per_row(const char* op, const Tensor& x, const Tensor& v, const char* what);
// x has rows: rank 1 or more.
void has_rows(const char* op, const Tensor& x);
// An op's out argument has exactly the result's shape.
void output(const char* op, const Tensor& out, const Shape& result);

LinearDims linear(const char* op, const Tensor& x, const Tensor& w, const Tensor* bias);
// linear()'s result shape: x's leading dims, then N.
Shape linear_result(const Tensor& x, const LinearDims& d);
// linear() whose result goes to out [.., N] (x's leading dims).
LinearDims linear(const char* op, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out);
void conv2d_3x3(const Tensor& x, const Tensor& w, const Tensor& bias);
// conv2d_3x3's contract, and an image of at least 2x2 (the stride-2 output is H / 2 x W / 2).
void conv2d_3x3_stride2(const Tensor& x, const Tensor& w, const Tensor& bias);
void attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal);
// attention() whose result goes to out [Lq, H, Dh], each of q, k, v and out with spare_rows
// more rows in its buffer past the view.
void attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor& out,
               int64_t spare_rows = 0);
void rope(const char* op, const Tensor& x, const Tensor& cos, const Tensor& sin);
// Per-head RMSNorm + RoPE of proj [tokens, H * Dh] into out of proj's shape: returns H.
int64_t rms_norm_rope(const Tensor& proj, const Tensor& weight, const Tensor& cos, const Tensor& sin,
                      const Tensor& out);
// table [V, D], host i64 ids [L], every id inside the table (a bad id is the user's input).
void embedding(const Tensor& table, const Tensor& ids);
void image_hwc(const char* op, const Tensor& x);  // one NHWC image [H, W, C]

// A permutation of x's axes: out_shape[k] = x.dim(dims[k]), and in_strides[k] the element stride
// of x along that axis (what a loop over the output steps through x by).
struct Permutation {
  Shape out_shape;
  std::vector<int64_t> in_strides;
};
// dims a permutation of x's axes, rank 1 to 6, elements of 1, 2 or 4 bytes.
Permutation permute(const Tensor& x, const std::vector<int64_t>& dims);

}  // namespace ditbatch::op_shapes
