// The reference GEMM: a 16x16-tiled kernel with fp32 accumulation for any transposes,
// leading dimensions, strided batch and epilogue. It backs up cuBLASLt when cuBLASLt offers no
// algorithm for a shape, and the tests compare the two.
#include "device_utils.cuh"
#include "gemm.h"

namespace ditbatch::cuda {

// ---------------------------------------------------------------------------------------------
// kernel
// ---------------------------------------------------------------------------------------------

constexpr int kTile = 16;

struct RefGemmArgs {
  int64_t m, n, k;
  const void* a;
  int64_t lda, stride_a;
  bool trans_a;
  const void* b;
  int64_t ldb, stride_b;
  bool trans_b;
  void* d;
  int64_t ldd, stride_d;
  float alpha;
  const void* bias;
  bool gelu;
};

template <typename TI, typename TD>
__global__ void gemm_reference_kernel(RefGemmArgs p) {
  __shared__ float a_s[kTile][kTile + 1];  // [k][m]
  __shared__ float b_s[kTile][kTile + 1];  // [k][n]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t i = int64_t{blockIdx.x} * kTile + tx, j = int64_t{blockIdx.y} * kTile + ty;
  const TI* A = static_cast<const TI*>(p.a) + blockIdx.z * p.stride_a;
  const TI* B = static_cast<const TI*>(p.b) + blockIdx.z * p.stride_b;
  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < p.k; k0 += kTile) {
    {  // a_s[ty][tx] = op(A)(row tile + tx, k0 + ty)
      const int64_t row = int64_t{blockIdx.x} * kTile + tx, kk = k0 + ty;
      float val = 0.0f;
      if (row < p.m && kk < p.k) val = to_f(p.trans_a ? A[kk + row * p.lda] : A[row + kk * p.lda]);
      a_s[ty][tx] = val;
    }
    {  // b_s[tx][ty] = op(B)(k0 + tx, col tile + ty)
      const int64_t kk = k0 + tx, col = int64_t{blockIdx.y} * kTile + ty;
      float val = 0.0f;
      if (kk < p.k && col < p.n) val = to_f(p.trans_b ? B[col + kk * p.ldb] : B[kk + col * p.ldb]);
      b_s[tx][ty] = val;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTile; ++kk) acc += a_s[kk][tx] * b_s[kk][ty];
    __syncthreads();
  }
  if (i >= p.m || j >= p.n) return;
  float value = p.alpha * acc;
  if (p.bias) value += to_f(static_cast<const TD*>(p.bias)[i]);
  if (p.gelu) value = 0.5f * value * (1.0f + tanhf(0.7978845608028654f * (value + 0.044715f * value * value * value)));
  static_cast<TD*>(p.d)[blockIdx.z * p.stride_d + i + j * p.ldd] = from_f<TD>(value);
}

// ---------------------------------------------------------------------------------------------
// launcher
// ---------------------------------------------------------------------------------------------

namespace {

void launch_reference(const CudaContext& ctx, const GemmCall& c) {
  RefGemmArgs p{c.m,       c.n,       c.k,        c.a.ptr, c.a.ld,  c.a.batch_stride, c.a.transposed,
                c.b.ptr,   c.b.ld,    c.b.batch_stride,   c.b.transposed, c.d, c.ldd, c.d_batch_stride,
                c.alpha,   c.bias,    c.epilogue == GemmEpilogue::GeluBias};
  const dim3 grid(static_cast<unsigned>((c.m + kTile - 1) / kTile), static_cast<unsigned>((c.n + kTile - 1) / kTile),
                  static_cast<unsigned>(c.batch));
  const dim3 block(kTile, kTile);
  dispatch_float(c.a.dtype, c.op, "the GEMM operands", [&](auto a) {
    using TI = decltype(a);
    dispatch_float(c.d_dtype, c.op, "the GEMM output", [&](auto d) {
      using TD = decltype(d);
      gemm_reference_kernel<TI, TD><<<grid, block, 0, ctx.stream>>>(p);
    });
  });
  ctx.launched(c.op);
}

}  // namespace

void gemm_reference(const CudaContext& ctx, const GemmCall& c) {
  if (c.m <= 0 || c.n <= 0 || c.k <= 0 || c.batch < 1 || c.batch > 65535)
    fail(cat(c.op, ": reference GEMM m ", c.m, " n ", c.n, " k ", c.k, " batch ", c.batch, " out of range"));
  // A grid's y side holds at most 65535 blocks: a wider output (the im2col of a megapixel image:
  // n is its pixel count) runs as column slices of B and D, one launch each.
  constexpr int64_t kMaxColumns = int64_t{65535} * kTile;
  for (int64_t n0 = 0; n0 < c.n; n0 += kMaxColumns) {
    GemmCall part = c;
    part.n = std::min(kMaxColumns, c.n - n0);
    const int64_t b_offset = c.b.transposed ? n0 : n0 * c.b.ld;  // op(B)'s column n0
    part.b.ptr = static_cast<const char*>(c.b.ptr) + b_offset * static_cast<int64_t>(dtype_size(c.b.dtype));
    part.d = static_cast<char*>(c.d) + n0 * c.ldd * static_cast<int64_t>(dtype_size(c.d_dtype));
    launch_reference(ctx, part);
  }
}

}  // namespace ditbatch::cuda
