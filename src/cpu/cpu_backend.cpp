#include "cpu/cpu_backend.h"

#include <cblas.h>
#include <immintrin.h>
#include <strings.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/op_shapes.h"

// OpenBLAS's run-time kernel selection (DYNAMIC_ARCH builds export these; weak, so that a
// build against another BLAS or a single-target OpenBLAS still links and skips the fix below).
extern "C" {
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
// SLEEF's tanh and exp within 1.0 ULP, their FMA builds (declared here: sleef.h shows the vector
// types only to code compiled for them). The AVX-512 and AVX2 variants give the same bits for
// every input (checked over 3e8 floats each); the tanh is the one torch's vectorised CPU GELU calls.
__m512 Sleef_tanhf16_u10avx512f(__m512);
__m256 Sleef_tanhf8_u10avx2(__m256);
__m512 Sleef_expf16_u10avx512f(__m512);
__m256 Sleef_expf8_u10avx2(__m256);
}

namespace ditbatch {
namespace {

// OpenBLAS picks its kernels by CPU model when the library loads. A model it does not know
// (Debian's 0.3.21 on Emerald Rapids, model 0xCF, or a VM that hides the model) falls back to
// the SSE3 "Prescott" kernels, about 3x slower than the AVX-512 ones on the same cores. When
// that happened and the user did not choose (OPENBLAS_CORETYPE), select the kernels by the
// instruction sets the CPU and OS do support, once, before the first GEMM. This is what
// OPENBLAS_CORETYPE=SkylakeX at start-up does.
void select_blas_kernels() {
  static const bool done = [] {
    const char* core = openblas_get_corename();
    if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit || std::getenv("OPENBLAS_CORETYPE") || !core ||
        strcasecmp(core, "prescott") != 0)
      return true;
    const char* target = nullptr;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512cd"))
      target = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      target = "Haswell";
    if (!target) return true;
    setenv("OPENBLAS_CORETYPE", target, 0);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
    return true;
  }();
  (void)done;
}

// Every op takes host fp32 tensors; a wrong one is a programming error worth a clear message.
void expect_f32(const char* op, const Tensor& t, const char* what) {
  DITBATCH_CHECK(t.defined() && t.device() == Device::Host && t.dtype() == DType::F32,
                 "{}: {} must be a host f32 tensor, got {}", op, what,
                 t.defined() ? t.describe() : "undefined");
}

// The layout ops move elements of any dtype.
void expect_host(const char* op, const Tensor& t, const char* what) {
  DITBATCH_CHECK(t.defined() && t.device() == Device::Host, "{}: {} must be a host tensor, got {}", op, what,
                 t.defined() ? t.describe() : "undefined");
}

// tanh and exp in place over n values: SLEEF's vector functions where the CPU has them (the tail
// goes through the same vector function, masked or padded), else the scalar libm function.
enum class VectorIsa { Avx512, Avx2, None };

VectorIsa vector_isa() {
  static const VectorIsa isa = __builtin_cpu_supports("avx512f")                                  ? VectorIsa::Avx512
                               : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? VectorIsa::Avx2
                                                                                                  : VectorIsa::None;
  return isa;
}

template <__m512 (*f)(__m512)>
__attribute__((target("avx512f"))) void map_avx512(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, f(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(x + i, tail, f(_mm512_maskz_loadu_ps(tail, x + i)));
  }
}

template <__m256 (*f)(__m256)>
__attribute__((target("avx2,fma"))) void map_avx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, f(_mm256_loadu_ps(x + i)));
  if (i < n) {
    float lanes[8] = {0};
    std::memcpy(lanes, x + i, static_cast<size_t>(n - i) * sizeof(float));
    _mm256_storeu_ps(lanes, f(_mm256_loadu_ps(lanes)));
    std::memcpy(x + i, lanes, static_cast<size_t>(n - i) * sizeof(float));
  }
}

void tanh_inplace(float* x, int64_t n) {
  switch (vector_isa()) {
    case VectorIsa::Avx512: map_avx512<Sleef_tanhf16_u10avx512f>(x, n); break;
    case VectorIsa::Avx2: map_avx2<Sleef_tanhf8_u10avx2>(x, n); break;
    case VectorIsa::None:
      for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
      break;
  }
}

void exp_inplace(float* x, int64_t n) {
  switch (vector_isa()) {
    case VectorIsa::Avx512: map_avx512<Sleef_expf16_u10avx512f>(x, n); break;
    case VectorIsa::Avx2: map_avx2<Sleef_expf8_u10avx2>(x, n); break;
    case VectorIsa::None:
      for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
      break;
  }
}

// Sum and maximum in 16 interleaved lanes, combined in a fixed order: vectorisable without
// reassociating, and the same result for a row whatever the thread count.
float lane_sum(const float* x, int64_t n) {
  float lanes[16] = {0};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) lanes[l] += x[j + l];
  for (int l = 0; j < n; ++j, ++l) lanes[l] += x[j];
  float total = 0.0f;
  for (float v : lanes) total += v;
  return total;
}

float lane_max(const float* x, int64_t n) {
  float lanes[16];
  std::fill(lanes, lanes + 16, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) lanes[l] = std::max(lanes[l], x[j + l]);
  for (int l = 0; j < n; ++j, ++l) lanes[l] = std::max(lanes[l], x[j]);
  return *std::max_element(lanes, lanes + 16);
}

// Parallelise only loops big enough to pay for the threads.
constexpr int64_t kParallelMin = 1 << 14;

// C[M, N] = A[M, K] B[N, K]^T + beta C on a fixed grid of tiles, one single-threaded OpenBLAS
// call per tile, tiles shared by OpenMP: every element gets the same operations whatever the
// thread count. OpenBLAS (OpenMP build) runs single-threaded only inside an active parallel
// region, so the region is always opened, even for one tile. A single row goes through sgemv
// (a GEMM would pack all of B to use it once).
void gemm_nt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
             float* C, int64_t ldc) {
  constexpr int64_t kTileM = 128, kTileN = 256;  // enough tiles to share even at S = 256
  const int64_t tiles_m = (M + kTileM - 1) / kTileM, tiles_n = (N + kTileN - 1) / kTileN;
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < tiles_m * tiles_n; ++t) {
    const int64_t i0 = (t / tiles_n) * kTileM, j0 = (t % tiles_n) * kTileN;
    const int m = static_cast<int>(std::min(kTileM, M - i0)), n = static_cast<int>(std::min(kTileN, N - j0));
    if (M == 1)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, static_cast<int>(K), 1.0f, B + j0 * ldb, static_cast<int>(ldb), A, 1,
                  beta, C + j0, 1);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, static_cast<int>(K), 1.0f, A + i0 * lda,
                  static_cast<int>(lda), B + j0 * ldb, static_cast<int>(ldb), beta, C + i0 * ldc + j0,
                  static_cast<int>(ldc));
  }
}

float sigmoid_silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

CpuBackend::CpuBackend() { select_blas_kernels(); }

// ---- memory --------------------------------------------------------------------------------

Tensor CpuBackend::empty(const Shape& shape, DType dtype) { return Tensor::host(shape, dtype); }

Tensor CpuBackend::upload(const Tensor& host, DType dtype) {
  DITBATCH_CHECK(host.device() == Device::Host, "upload: {} is not a host tensor", host.describe());
  if (!is_float(host.dtype()) || !is_float(dtype)) {
    DITBATCH_CHECK(host.dtype() == dtype, "upload: cannot convert {} to {}", host.describe(),
                   dtype_name(dtype));
    return host.clone();
  }
  DITBATCH_CHECK(dtype == DType::F32, "cpu backend computes in f32, asked to upload as {}",
                 dtype_name(dtype));
  return host.to_f32();
}

Tensor CpuBackend::upload_weight(const Tensor& host) {
  // An f32 weight read from the file is the weight: its buffer is kept, not copied.
  if (host.device() == Device::Host && host.dtype() == DType::F32) return host;
  return upload(host, DType::F32);
}

Tensor CpuBackend::to_host(const Tensor& t) {
  DITBATCH_CHECK(t.defined(), "to_host: undefined tensor");
  return t.clone();
}

void CpuBackend::copy_(const Tensor& dst, const Tensor& src) {
  expect_f32("copy_", dst, "dst");
  expect_f32("copy_", src, "src");
  op_shapes::output("copy_", dst, src.shape());
  if (src.nbytes() > 0) std::memcpy(dst.raw(), src.raw(), src.nbytes());
}

// ---- dense linear algebra ------------------------------------------------------------------

void CpuBackend::linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) {
  expect_f32("linear", x, "x");
  expect_f32("linear", w, "w");
  expect_f32("linear", out, "out");
  if (bias) expect_f32("linear", *bias, "bias");
  // Plain variables, not a structured binding: clang 14 cannot capture one in an OpenMP region.
  const op_shapes::LinearDims dims = op_shapes::linear("linear", x, w, bias, out);
  const int64_t M = dims.M, N = dims.N, K = dims.K;
  float* yp = out.data<float>();
  if (M == 0 || N == 0) return;
  // As torch's addmm: the output starts as the bias (or zero) and the GEMM adds x w^T to it,
  // which saves a pass over the output.
  if (bias) {
    const float* b = bias->data<float>();
#pragma omp parallel for schedule(static) if (M * N > kParallelMin)
    for (int64_t i = 0; i < M; ++i) std::memcpy(yp + i * N, b, static_cast<size_t>(N) * sizeof(float));
  }
  gemm_nt(M, N, K, x.data<float>(), K, w.data<float>(), K, bias ? 1.0f : 0.0f, yp, N);
}

namespace {

// A 3x3 convolution of x [H, W, Cin] into y [Ho, Wo, Cout]: output (oy, ox) reads input row
// oy * stride + ky - pad (ky in 0..2), likewise for columns; taps outside x are zero, so the
// padding after the image is whatever the output size implies.
void conv3x3_im2col(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride, int64_t pad, Tensor& y) {
  const int64_t H = x.dim(0), W = x.dim(1), Cin = x.dim(2), Ho = y.dim(0), Wo = y.dim(1), Cout = w.dim(0);
  const int64_t K = 9 * Cin;
  // im2col over a band of output rows at a time keeps the column buffer near 64 MB at any size.
  const int64_t band =
      std::clamp<int64_t>((int64_t{16} << 20) / std::max<int64_t>(1, Wo * K), 1, std::max<int64_t>(Ho, 1));
  std::vector<float> col(static_cast<size_t>(band * Wo * K));
  const float* xp = x.data<float>();
  const float* b = bias.data<float>();
  for (int64_t y0 = 0; y0 < Ho; y0 += band) {
    const int64_t rows = std::min(band, Ho - y0);
    const int64_t pixels = rows * Wo;
#pragma omp parallel for schedule(static) if (pixels * K > kParallelMin)
    for (int64_t p = 0; p < pixels; ++p) {
      const int64_t oy = y0 + p / Wo, ox = p % Wo;
      float* dst = col.data() + p * K;
      for (int64_t ky = 0; ky < 3; ++ky) {
        for (int64_t kx = 0; kx < 3; ++kx, dst += Cin) {
          const int64_t iy = oy * stride + ky - pad, ix = ox * stride + kx - pad;
          if (iy < 0 || iy >= H || ix < 0 || ix >= W)
            std::fill(dst, dst + Cin, 0.0f);
          else
            std::memcpy(dst, xp + (iy * W + ix) * Cin, static_cast<size_t>(Cin) * sizeof(float));
        }
      }
    }
    float* out = y.data<float>() + y0 * Wo * Cout;
    gemm_nt(pixels, Cout, K, col.data(), K, w.data<float>(), K, 0.0f, out, Cout);
#pragma omp parallel for schedule(static) if (pixels * Cout > kParallelMin)
    for (int64_t p = 0; p < pixels; ++p)
      for (int64_t c = 0; c < Cout; ++c) out[p * Cout + c] += b[c];
  }
}

}  // namespace

Tensor CpuBackend::conv2d_3x3(const Tensor& x, const Tensor& w, const Tensor& bias) {
  expect_f32("conv2d_3x3", x, "x");
  expect_f32("conv2d_3x3", w, "w");
  expect_f32("conv2d_3x3", bias, "bias");
  op_shapes::conv2d_3x3(x, w, bias);
  Tensor y = Tensor::host({x.dim(0), x.dim(1), w.dim(0)});
  conv3x3_im2col(x, w, bias, /*stride=*/1, /*pad=*/1, y);
  return y;
}

Tensor CpuBackend::conv2d_3x3_stride2(const Tensor& x, const Tensor& w, const Tensor& bias) {
  expect_f32("conv2d_3x3_stride2", x, "x");
  expect_f32("conv2d_3x3_stride2", w, "w");
  expect_f32("conv2d_3x3_stride2", bias, "bias");
  op_shapes::conv2d_3x3_stride2(x, w, bias);
  Tensor y = Tensor::host({x.dim(0) / 2, x.dim(1) / 2, w.dim(0)});
  conv3x3_im2col(x, w, bias, /*stride=*/2, /*pad=*/0, y);  // the bottom/right pad: taps past x read zero
  return y;
}

// Blocked attention with an online softmax (FlashAttention's recurrence): memory stays
// O(block x head_dim) per thread however long the sequence, e.g. the VAE mid-block at 1024^2
// (16,384 tokens) never materialises its 1 GiB score matrix.
void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal,
                           const Tensor& out, int64_t spare_rows) {
  expect_f32("attention", q, "q");
  expect_f32("attention", k, "k");
  expect_f32("attention", v, "v");
  expect_f32("attention", out, "out");
  op_shapes::attention(q, k, v, causal, out, spare_rows);
  const int64_t Lq = q.dim(0), H = q.dim(1), Dh = q.dim(2), Lk = k.dim(0), Hkv = k.dim(1);
  const int64_t group = H / Hkv;
  constexpr int64_t BQ = 64, BK = 256;
  const int64_t q_blocks = (Lq + BQ - 1) / BQ;
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  float* op = out.data<float>();
  const float neg_inf = -std::numeric_limits<float>::infinity();

#pragma omp parallel
  {
    std::vector<float> scores(BQ * BK), acc(BQ * Dh), row_max(BQ), row_sum(BQ);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < H * q_blocks; ++task) {
      const int64_t h = task / q_blocks, q0 = (task % q_blocks) * BQ;
      const int64_t nq = std::min(BQ, Lq - q0), g = h / group;
      std::fill(row_max.begin(), row_max.end(), neg_inf);
      std::fill(row_sum.begin(), row_sum.end(), 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      const int64_t k_end = causal ? std::min(Lk, q0 + nq) : Lk;
      for (int64_t k0 = 0; k0 < k_end; k0 += BK) {
        const int64_t nk = std::min(BK, k_end - k0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nq), static_cast<int>(nk),
                    static_cast<int>(Dh), scale, qp + (q0 * H + h) * Dh, static_cast<int>(H * Dh),
                    kp + (k0 * Hkv + g) * Dh, static_cast<int>(Hkv * Dh), 0.0f, scores.data(),
                    static_cast<int>(BK));
        for (int64_t i = 0; i < nq; ++i) {
          float* s = scores.data() + i * BK;
          const int64_t valid = causal ? std::clamp<int64_t>(q0 + i - k0 + 1, 0, nk) : nk;
          const float new_max = std::max(row_max[i], lane_max(s, valid));
          if (new_max == neg_inf) {  // every key so far masked: nothing to add
            std::fill(s, s + nk, 0.0f);
            continue;
          }
          const float correction = std::exp(row_max[i] - new_max);
          for (int64_t j = 0; j < valid; ++j) s[j] -= new_max;
          exp_inplace(s, valid);
          const float sum = lane_sum(s, valid);
          std::fill(s + valid, s + nk, 0.0f);
          row_sum[i] = row_sum[i] * correction + sum;
          row_max[i] = new_max;
          if (correction != 1.0f)
            for (int64_t d = 0; d < Dh; ++d) acc[i * Dh + d] *= correction;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nq), static_cast<int>(Dh),
                    static_cast<int>(nk), 1.0f, scores.data(), static_cast<int>(BK),
                    vp + (k0 * Hkv + g) * Dh, static_cast<int>(Hkv * Dh), 1.0f, acc.data(),
                    static_cast<int>(Dh));
      }
      for (int64_t i = 0; i < nq; ++i) {
        float* dst = op + ((q0 + i) * H + h) * Dh;
        const float inv = row_sum[i] > 0.0f ? 1.0f / row_sum[i] : 0.0f;
        for (int64_t d = 0; d < Dh; ++d) dst[d] = acc[i * Dh + d] * inv;
      }
    }
  }
}

// ---- normalisation -------------------------------------------------------------------------

Tensor CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  expect_f32("rms_norm", x, "x");
  expect_f32("rms_norm", weight, "weight");
  op_shapes::row_vector("rms_norm", x, weight, "weight");
  const int64_t R = x.rows(), C = x.cols();
  Tensor y = Tensor::host(x.shape());
  const float* xp = x.data<float>();
  const float* wp = weight.data<float>();
  float* yp = y.data<float>();
#pragma omp parallel for schedule(static) if (R * C > kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = xp + r * C;
    double sum_sq = 0.0;
    for (int64_t c = 0; c < C; ++c) sum_sq += static_cast<double>(xr[c]) * xr[c];
    const float variance = static_cast<float>(sum_sq / static_cast<double>(C));
    const float inv_rms = 1.0f / std::sqrt(variance + eps);  // torch: rsqrt as 1/sqrt
    for (int64_t c = 0; c < C; ++c) yp[r * C + c] = (xr[c] * inv_rms) * wp[c];
  }
  return y;
}

Tensor CpuBackend::layer_norm_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale,
                                       float eps) {
  expect_f32("layer_norm_modulate", x, "x");
  expect_f32("layer_norm_modulate", shift, "shift");
  expect_f32("layer_norm_modulate", scale, "scale");
  op_shapes::row_vector("layer_norm_modulate", x, shift, "shift");
  op_shapes::row_vector("layer_norm_modulate", x, scale, "scale");
  const int64_t R = x.rows(), C = x.cols();
  Tensor y = Tensor::host(x.shape());
  const float* xp = x.data<float>();
  const float* sh = shift.data<float>();
  const float* sc = scale.data<float>();
  float* yp = y.data<float>();
#pragma omp parallel for schedule(static) if (R * C > kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = xp + r * C;
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += xr[c];
    const double mean_d = sum / static_cast<double>(C);
    double sum_sq = 0.0;
    for (int64_t c = 0; c < C; ++c) sum_sq += (xr[c] - mean_d) * (xr[c] - mean_d);
    const float mean = static_cast<float>(mean_d);
    const float variance = static_cast<float>(sum_sq / static_cast<double>(C));
    const float rstd = 1.0f / std::sqrt(variance + eps);
    const float bias = -rstd * mean;  // torch: y = x * rstd + (-rstd * mean)
    for (int64_t c = 0; c < C; ++c) {
      const float normed = xr[c] * rstd + bias;
      yp[r * C + c] = normed * (1.0f + sc[c]) + sh[c];
    }
  }
  return y;
}

Tensor CpuBackend::l2_normalize(const Tensor& x, const Tensor& gamma, float scale) {
  expect_f32("l2_normalize", x, "x");
  expect_f32("l2_normalize", gamma, "gamma");
  op_shapes::row_vector("l2_normalize", x, gamma, "gamma");
  const int64_t R = x.rows(), C = x.cols();
  Tensor y = Tensor::host(x.shape());
  const float* xp = x.data<float>();
  const float* gp = gamma.data<float>();
  float* yp = y.data<float>();
#pragma omp parallel for schedule(static) if (R * C > kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = xp + r * C;
    double sum_sq = 0.0;
    for (int64_t c = 0; c < C; ++c) sum_sq += static_cast<double>(xr[c]) * xr[c];
    const float norm = std::max(static_cast<float>(std::sqrt(sum_sq)), 1e-12f);
    for (int64_t c = 0; c < C; ++c) yp[r * C + c] = ((xr[c] / norm) * scale) * gp[c];
  }
  return y;
}

// ---- element-wise --------------------------------------------------------------------------

Tensor CpuBackend::silu(const Tensor& x) {
  expect_f32("silu", x, "x");
  Tensor y = Tensor::host(x.shape());
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) yp[i] = sigmoid_silu(xp[i]);
  return y;
}

Tensor CpuBackend::gelu_tanh(const Tensor& x) {
  expect_f32("gelu_tanh", x, "x");
  Tensor y = Tensor::host(x.shape());
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const int64_t n = x.numel();
  // The constants and operation order of torch's GELU(approximate="tanh"), each op rounded.
  // Three passes over a chunk that stays in L1, so that tanh runs vectorised in the middle.
  const float beta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
  const float kappa = 0.044715f;
  constexpr int64_t kChunk = 2048;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t begin = chunk * kChunk, count = std::min(kChunk, n - begin);
    const float* v = xp + begin;
    float* out = yp + begin;
    for (int64_t i = 0; i < count; ++i) out[i] = beta * (v[i] + kappa * (v[i] * v[i] * v[i]));
    tanh_inplace(out, count);
    for (int64_t i = 0; i < count; ++i) out[i] = 0.5f * v[i] * (1.0f + out[i]);
  }
  return y;
}

Tensor CpuBackend::gelu_erf(const Tensor& x) {
  expect_f32("gelu_erf", x, "x");
  Tensor y = Tensor::host(x.shape());
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const int64_t n = x.numel();
  // torch's order: x * 0.5 * (1 + erf(x * sqrt(1/2))), each op rounded to f32.
  const float sqrt_half = static_cast<float>(M_SQRT1_2);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) yp[i] = xp[i] * 0.5f * (1.0f + std::erf(xp[i] * sqrt_half));
  return y;
}

Tensor CpuBackend::silu_mul(const Tensor& gate, const Tensor& up) {
  expect_f32("silu_mul", gate, "gate");
  expect_f32("silu_mul", up, "up");
  op_shapes::same_shape("silu_mul", gate, up);
  Tensor y = Tensor::host(gate.shape());
  const float* g = gate.data<float>();
  const float* u = up.data<float>();
  float* yp = y.data<float>();
  const int64_t n = gate.numel();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) yp[i] = sigmoid_silu(g[i]) * u[i];
  return y;
}

namespace {
// x[i] = f(x[i], y[i]) for two f32 tensors of one shape, or with y a row vector applied to
// every row where the op allows it: the in-place element-wise ops.
template <typename F>
void elementwise_inplace(const char* op, Tensor& x, const Tensor& y, bool row_vector_allowed, F f) {
  expect_f32(op, x, "x");
  expect_f32(op, y, "y");
  const bool broadcast = row_vector_allowed ? op_shapes::same_shape_or_row_vector(op, x, y)
                                            : (op_shapes::same_shape(op, x, y), false);
  float* xp = x.data<float>();
  const float* yp = y.data<float>();
  const int64_t n = x.numel(), period = broadcast ? x.cols() : n;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) xp[i] = f(xp[i], yp[broadcast ? i % period : i]);
}
}  // namespace

void CpuBackend::add_(Tensor& x, const Tensor& y) {
  elementwise_inplace("add_", x, y, true, [](float a, float b) { return a + b; });
}

void CpuBackend::gated_add_(Tensor& x, const Tensor& gate, const Tensor& y) {
  expect_f32("gated_add_", x, "x");
  expect_f32("gated_add_", gate, "gate");
  expect_f32("gated_add_", y, "y");
  op_shapes::same_shape("gated_add_", x, y);
  op_shapes::row_vector("gated_add_", x, gate, "gate");
  const int64_t R = x.rows(), C = x.cols();
  float* xp = x.data<float>();
  const float* g = gate.data<float>();
  const float* yp = y.data<float>();
#pragma omp parallel for schedule(static) if (R * C > kParallelMin)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) xp[r * C + c] += g[c] * yp[r * C + c];
}

void CpuBackend::clamp_(Tensor& x, float lo, float hi) {
  expect_f32("clamp_", x, "x");
  float* xp = x.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) xp[i] = std::min(std::max(xp[i], lo), hi);
}

// ---- positions -----------------------------------------------------------------------------

namespace {
void check_rope(const char* op, const Tensor& x, const Tensor& cos, const Tensor& sin) {
  expect_f32(op, x, "x");
  expect_f32(op, cos, "cos");
  expect_f32(op, sin, "sin");
  op_shapes::rope(op, x, cos, sin);
}
}  // namespace

void CpuBackend::rope_interleaved_(Tensor& x, const Tensor& cos, const Tensor& sin) {
  check_rope("rope_interleaved_", x, cos, sin);
  const int64_t L = x.dim(0), H = x.dim(1), Dh = x.dim(2), half = Dh / 2;
  float* xp = x.data<float>();
  const float* cp = cos.data<float>();
  const float* sp = sin.data<float>();
#pragma omp parallel for schedule(static) if (L * H * Dh > kParallelMin)
  for (int64_t l = 0; l < L; ++l)
    for (int64_t h = 0; h < H; ++h) {
      float* v = xp + (l * H + h) * Dh;
      for (int64_t m = 0; m < half; ++m) {
        const float a = v[2 * m], b = v[2 * m + 1], c = cp[l * half + m], s = sp[l * half + m];
        // complex64 multiply as torch does it: every product rounded, then one add/sub
        const float ac = a * c, bs = b * s, as = a * s, bc = b * c;
        v[2 * m] = ac - bs;
        v[2 * m + 1] = as + bc;
      }
    }
}

void CpuBackend::rope_neox_(Tensor& x, const Tensor& cos, const Tensor& sin) {
  check_rope("rope_neox_", x, cos, sin);
  const int64_t L = x.dim(0), H = x.dim(1), Dh = x.dim(2), half = Dh / 2;
  float* xp = x.data<float>();
  const float* cp = cos.data<float>();
  const float* sp = sin.data<float>();
#pragma omp parallel for schedule(static) if (L * H * Dh > kParallelMin)
  for (int64_t l = 0; l < L; ++l)
    for (int64_t h = 0; h < H; ++h) {
      float* v = xp + (l * H + h) * Dh;
      for (int64_t j = 0; j < half; ++j) {
        const float a = v[j], b = v[j + half], c = cp[l * half + j], s = sp[l * half + j];
        const float ac = a * c, bs = b * s, bc = b * c, as = a * s;
        v[j] = ac - bs;
        v[j + half] = bc + as;
      }
    }
}

// ---- gathers and resampling ----------------------------------------------------------------

Tensor CpuBackend::embedding(const Tensor& table, const Tensor& ids) {
  expect_f32("embedding", table, "table");
  op_shapes::embedding(table, ids);
  const int64_t L = ids.dim(0), D = table.dim(1);
  Tensor y = Tensor::host({L, D});
  const int64_t* id = ids.data<int64_t>();
  for (int64_t i = 0; i < L; ++i)
    std::memcpy(y.data<float>() + i * D, table.data<float>() + id[i] * D, static_cast<size_t>(D) * 4);
  return y;
}

Tensor CpuBackend::upsample_nearest2x(const Tensor& x) {
  expect_f32("upsample_nearest2x", x, "x");
  op_shapes::image_hwc("upsample_nearest2x", x);
  const int64_t H = x.dim(0), W = x.dim(1), C = x.dim(2);
  Tensor y = Tensor::host({2 * H, 2 * W, C});
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
#pragma omp parallel for schedule(static) if (4 * H * W * C > kParallelMin)
  for (int64_t oy = 0; oy < 2 * H; ++oy)
    for (int64_t ox = 0; ox < 2 * W; ++ox)
      std::memcpy(yp + (oy * 2 * W + ox) * C, xp + ((oy / 2) * W + ox / 2) * C,
                  static_cast<size_t>(C) * sizeof(float));
  return y;
}

// ---- axpy, division, row scaling, row norms ---------------------------------------------------

void CpuBackend::axpy_(Tensor& x, float alpha, const Tensor& y) {
  elementwise_inplace("axpy_", x, y, false, [alpha](float a, float b) { return a + alpha * b; });
}

void CpuBackend::div_(Tensor& x, const Tensor& y) {
  elementwise_inplace("div_", x, y, true, [](float a, float b) { return a / b; });
}

void CpuBackend::scale_rows_(Tensor& x, const Tensor& s) {
  expect_f32("scale_rows_", x, "x");
  expect_f32("scale_rows_", s, "s");
  op_shapes::per_row("scale_rows_", x, s, "s");
  const int64_t R = x.rows(), C = x.cols();
  float* xp = x.data<float>();
  const float* sp = s.data<float>();
#pragma omp parallel for schedule(static) if (R * C > kParallelMin)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) xp[r * C + c] *= sp[r];
}

void CpuBackend::scale_shift_(Tensor& x, float scale, float shift) {
  expect_f32("scale_shift_", x, "x");
  float* xp = x.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) xp[i] = xp[i] * scale + shift;
}

Tensor CpuBackend::to_u8(const Tensor& x) {
  expect_f32("to_u8", x, "x");
  Tensor out = Tensor::host(x.shape(), DType::U8);
  const float* src = x.data<float>();
  uint8_t* dst = out.data<uint8_t>();
#pragma omp parallel for schedule(static) if (x.numel() > kParallelMin)
  for (int64_t i = 0; i < x.numel(); ++i) {
    float v = src[i];
    v = v < 0.0f ? 0.0f : v;  // a NaN passes both comparisons and becomes 0 below
    v = 255.0f < v ? 255.0f : v;
    dst[i] = v == v ? static_cast<uint8_t>(std::nearbyint(v)) : 0;  // ties to even, as np.round
  }
  return out;
}

Tensor CpuBackend::row_norms(const Tensor& x) {
  expect_f32("row_norms", x, "x");
  op_shapes::has_rows("row_norms", x);
  const int64_t R = x.rows(), C = x.cols();
  Tensor out = Tensor::host({R});
  const float* xp = x.data<float>();
  float* op = out.data<float>();
#pragma omp parallel for schedule(static) if (R * C > kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    double sum_sq = 0.0;
    for (int64_t c = 0; c < C; ++c) sum_sq += static_cast<double>(xp[r * C + c]) * xp[r * C + c];
    op[r] = static_cast<float>(std::sqrt(sum_sq));
  }
  return out;
}

// ---- layout --------------------------------------------------------------------------------

namespace {
// out[o] = x[in(o)] for elements of T: walks the output in order, the input by the permuted
// strides.
template <typename T>
void permute_elements(const T* x, T* out, const Shape& out_shape, const std::vector<int64_t>& in_strides) {
  const auto rank = out_shape.size();
  const int64_t n = shape_numel(out_shape);
  std::vector<int64_t> index(rank, 0);
  int64_t src = 0;
  for (int64_t o = 0; o < n; ++o) {
    out[o] = x[src];
    for (size_t k = rank; k-- > 0;) {  // odometer step over the output's index
      src += in_strides[k];
      if (++index[k] < out_shape[k]) break;
      src -= in_strides[k] * out_shape[k];
      index[k] = 0;
    }
  }
}
}  // namespace

Tensor CpuBackend::permute(const Tensor& x, const std::vector<int64_t>& dims) {
  expect_host("permute", x, "x");
  const auto [out_shape, in_strides] = op_shapes::permute(x, dims);
  Tensor out = Tensor::host(out_shape, x.dtype());
  if (out.numel() == 0) return out;
  switch (dtype_size(x.dtype())) {
    case 1: permute_elements(x.data<uint8_t>(), out.data<uint8_t>(), out_shape, in_strides); break;
    case 2: permute_elements(x.data<uint16_t>(), out.data<uint16_t>(), out_shape, in_strides); break;
    case 4: permute_elements(x.data<uint32_t>(), out.data<uint32_t>(), out_shape, in_strides); break;
    default: break;  // op_shapes::permute refused it
  }
  return out;
}

int64_t CpuBackend::count_nonfinite(const Tensor& x) {
  expect_f32("count_nonfinite", x, "x");
  const float* p = x.data<float>();
  int64_t n = 0;
#pragma omp parallel for schedule(static) reduction(+ : n) if (x.numel() > kParallelMin)
  for (int64_t i = 0; i < x.numel(); ++i) n += !std::isfinite(p[i]);
  return n;
}

}  // namespace ditbatch
