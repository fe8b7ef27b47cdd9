#include "core/op_shapes.h"

#include <fmt/ranges.h>

#include <utility>
#include <vector>

#include "core/error.h"

namespace ditbatch::op_shapes {

namespace {
std::string describe(const Tensor& t) { return t.defined() ? t.describe() : "undefined"; }
}  // namespace

void same_shape(const char* op, const Tensor& a, const Tensor& b) {
  DITBATCH_CHECK(a.shape() == b.shape(), "{}: shapes differ: {} vs {}", op, a.describe(), b.describe());
}

bool same_shape_or_row_vector(const char* op, const Tensor& x, const Tensor& y) {
  if (x.shape() == y.shape()) return false;
  DITBATCH_CHECK(x.rank() >= 1 && y.rank() == 1 && y.dim(0) == x.cols(),
                 "{}: x {} y {} (expected y of x's shape, or [{}]: one value per column)", op, x.describe(),
                 y.describe(), x.cols());
  return true;
}

void row_vector(const char* op, const Tensor& x, const Tensor& v, const char* what) {
  DITBATCH_CHECK(v.numel() == x.cols(), "{}: x {} {} {} (expected {} values, one per column)", op, x.describe(), what,
                 v.describe(), x.cols());
}

void per_row(const char* op, const Tensor& x, const Tensor& v, const char* what) {
  has_rows(op, x);
  DITBATCH_CHECK(v.rank() == 1 && v.numel() == x.rows(), "{}: x {} {} {} (expected [{}], one value per row)", op,
                 x.describe(), what, v.describe(), x.rows());
}

void has_rows(const char* op, const Tensor& x) {
  DITBATCH_CHECK(x.rank() >= 1, "{}: x {} (expected rows: rank 1 or more)", op, x.describe());
}

void output(const char* op, const Tensor& out, const Shape& result) {
  DITBATCH_CHECK(out.defined() && out.shape() == result, "{}: out {} (expected the result's shape [{}])", op,
                 describe(out), fmt::join(result, ", "));
}

LinearDims linear(const char* op, const Tensor& x, const Tensor& w, const Tensor* bias) {
  DITBATCH_CHECK(x.rank() >= 1 && w.rank() == 2 && x.cols() == w.dim(1),
                 "{}: x {} and w {} (expected [.., K], [N, K])", op, x.describe(), w.describe());
  const LinearDims d{x.rows(), w.dim(0), x.cols()};
  if (bias) DITBATCH_CHECK(bias->numel() == d.N, "{}: bias {} for N = {}", op, bias->describe(), d.N);
  DITBATCH_CHECK(d.K > 0 || d.M == 0 || d.N == 0, "{}: x {} has no columns", op, x.describe());
  return d;
}

Shape linear_result(const Tensor& x, const LinearDims& d) {
  Shape result = x.shape();
  result.back() = d.N;
  return result;
}

LinearDims linear(const char* op, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) {
  const LinearDims d = linear(op, x, w, bias);
  output(op, out, linear_result(x, d));
  return d;
}

void conv2d_3x3(const Tensor& x, const Tensor& w, const Tensor& bias) {
  DITBATCH_CHECK(x.rank() == 3 && w.rank() == 2 && w.dim(1) == 9 * x.dim(2) && bias.numel() == w.dim(0),
                 "conv2d_3x3: x {} (expected [H, W, Cin]), w {} (expected [Cout, 9*Cin]), bias {}", x.describe(),
                 w.describe(), bias.describe());
  DITBATCH_CHECK(x.dim(2) > 0 || x.dim(0) * x.dim(1) == 0 || w.dim(0) == 0, "conv2d_3x3: x {} has no channels",
                 x.describe());
}

void conv2d_3x3_stride2(const Tensor& x, const Tensor& w, const Tensor& bias) {
  DITBATCH_CHECK(x.rank() == 3 && w.rank() == 2 && w.dim(1) == 9 * x.dim(2) && bias.numel() == w.dim(0),
                 "conv2d_3x3_stride2: x {} (expected [H, W, Cin]), w {} (expected [Cout, 9*Cin]), bias {}",
                 x.describe(), w.describe(), bias.describe());
  DITBATCH_CHECK(x.dim(0) >= 2 && x.dim(1) >= 2 && x.dim(2) > 0,
                 "conv2d_3x3_stride2: x {} (expected H, W >= 2 and channels: a 3x3 window needs 2 rows and columns "
                 "plus the padding)",
                 x.describe());
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  DITBATCH_CHECK(q.rank() == 3 && k.rank() == 3 && k.shape() == v.shape() && q.dim(2) == k.dim(2) && k.dim(1) > 0 &&
                     q.dim(1) % k.dim(1) == 0,
                 "attention: q {} k {} v {} (expected [Lq, H, Dh], [Lk, Hkv, Dh] with H % Hkv == 0)", q.describe(),
                 k.describe(), v.describe());
  DITBATCH_CHECK(!causal || q.dim(0) == k.dim(0), "attention: causal needs Lq == Lk, got {} and {}", q.dim(0),
                 k.dim(0));
  DITBATCH_CHECK(k.dim(0) > 0 || q.dim(0) == 0 || q.dim(2) == 0, "attention: no keys (k {})", k.describe());
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor& out,
               int64_t spare_rows) {
  attention(q, k, v, causal);
  output("attention", out, q.shape());
  DITBATCH_CHECK(spare_rows >= 0, "attention: {} spare rows", spare_rows);
  for (const auto& [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}}) {
    const size_t row_bytes = static_cast<size_t>(t->dim(1) * t->dim(2)) * dtype_size(t->dtype());
    const size_t rows_after = row_bytes ? t->bytes_after() / row_bytes : 0;
    DITBATCH_CHECK(row_bytes == 0 || rows_after >= static_cast<size_t>(spare_rows),
                   "attention: {} has {} rows past it in its buffer, fewer than the {} spare rows ({} {})", name,
                   rows_after, spare_rows, name, t->describe());
  }
}

void rope(const char* op, const Tensor& x, const Tensor& cos, const Tensor& sin) {
  DITBATCH_CHECK(cos.dtype() == DType::F32 && sin.dtype() == DType::F32, "{}: cos {} and sin {} must be f32 tables", op,
                 cos.describe(), sin.describe());
  DITBATCH_CHECK(x.rank() == 3 && x.dim(2) % 2 == 0 && cos.rank() == 2 && cos.shape() == sin.shape() &&
                     cos.dim(0) == x.dim(0) && cos.dim(1) == x.dim(2) / 2,
                 "{}: x {} (expected [L, H, Dh]) cos {} sin {} (expected [L, Dh/2])", op, x.describe(), cos.describe(),
                 sin.describe());
}

int64_t rms_norm_rope(const Tensor& proj, const Tensor& weight, const Tensor& cos, const Tensor& sin,
                      const Tensor& out) {
  const char* op = "rms_norm_rope";
  const int64_t tokens = proj.rows(), Dh = weight.numel();
  DITBATCH_CHECK(proj.rank() == 2 && Dh > 0 && Dh % 2 == 0 && proj.cols() % Dh == 0,
                 "{}: proj {} (expected [tokens, H * Dh]) with norm weight {} (Dh, even)", op, proj.describe(),
                 weight.describe());
  output(op, out, proj.shape());
  DITBATCH_CHECK(cos.dtype() == DType::F32 && sin.dtype() == DType::F32 && cos.rank() == 2 && cos.shape() == sin.shape() &&
                     cos.dim(0) == tokens && cos.dim(1) == Dh / 2,
                 "{}: cos {} sin {} (expected f32 [{}, {}])", op, cos.describe(), sin.describe(), tokens, Dh / 2);
  return proj.cols() / Dh;
}

void embedding(const Tensor& table, const Tensor& ids) {
  DITBATCH_CHECK(table.rank() == 2 && ids.defined() && ids.rank() == 1 && ids.dtype() == DType::I64 &&
                     ids.device() == Device::Host,
                 "embedding: table {} (expected [V, D]) ids {} (expected host i64 [L])", table.describe(), describe(ids));
  const int64_t L = ids.dim(0), V = table.dim(0);
  const int64_t* id = ids.data<int64_t>();
  for (int64_t i = 0; i < L; ++i)
    if (id[i] < 0 || id[i] >= V)
      fail_input("token id {} at position {} is outside the embedding table of {} rows", id[i], i, V);
}

void image_hwc(const char* op, const Tensor& x) {
  DITBATCH_CHECK(x.rank() == 3, "{}: x {} (expected [H, W, C])", op, x.describe());
}

Permutation permute(const Tensor& x, const std::vector<int64_t>& dims) {
  const auto rank = static_cast<size_t>(x.rank());
  std::vector<bool> seen(rank, false);
  bool ok = rank >= 1 && rank <= 6 && dims.size() == rank;
  for (size_t k = 0; ok && k < dims.size(); ++k) {
    ok = dims[k] >= 0 && static_cast<size_t>(dims[k]) < rank && !seen[static_cast<size_t>(dims[k])];
    if (ok) seen[static_cast<size_t>(dims[k])] = true;
  }
  DITBATCH_CHECK(ok, "permute: x {} dims [{}] (expected a permutation of its {} axes, rank 1 to 6)", x.describe(),
                 fmt::join(dims, ", "), x.rank());
  const size_t elem = dtype_size(x.dtype());
  DITBATCH_CHECK(elem == 1 || elem == 2 || elem == 4, "permute: x {} (expected elements of 1, 2 or 4 bytes)",
                 x.describe());
  std::vector<int64_t> strides(rank);
  for (int64_t k = x.rank() - 1, stride = 1; k >= 0; stride *= x.dim(k), --k) strides[static_cast<size_t>(k)] = stride;
  Permutation p{Shape(rank), std::vector<int64_t>(rank)};
  for (size_t k = 0; k < rank; ++k) {
    p.out_shape[k] = x.dim(dims[k]);
    p.in_strides[k] = strides[static_cast<size_t>(dims[k])];
  }
  return p;
}

}  // namespace ditbatch::op_shapes
