// Every Backend op on CUDA against the CPU backend (ggml's test-backend-ops): each case of
// op_cases.cpp in bf16 mode (the fast path) and in f32 mode (every kernel held to fp32
// rounding), with every device allocation poisoned (0xFF bytes = NaN) so that an element a
// kernel leaves unwritten fails the finiteness check. Attention is also held to FlashAttention's
// rule: its error against a float64 reference at most ~2x that of a naive bf16 implementation.
// Then the paths and dtype combinations the models use, each attention path, the cuBLASLt
// GEMMs against our reference kernel, and the allocator's steady state.
//
// Without a GPU every test skips, saying why; without a CUDA build one test skips.
#include <gtest/gtest.h>

#ifndef DITBATCH_HAVE_CUDA

TEST(CudaOps, SkippedWithoutCudaBuild) { GTEST_SKIP() << "built without CUDA (-DDITBATCH_CUDA=OFF)"; }

#else

#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "cuda_test_util.h"
#include "op_cases.h"
#include "test_util.h"

using namespace ditbatch;

namespace {

std::unique_ptr<CudaBackend> make_backend(DType act, std::optional<CudaAttentionPath> attention = std::nullopt) {
  return test::make_cuda_test_backend(act, true, attention);
}

Tensor round_bf16(const Tensor& host) {
  Tensor out = host.to_f32().clone();
  float* p = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = bf16_to_f32(f32_to_bf16(p[i]));
  return out;
}

// The case's host inputs as the CUDA backend sees them: activations and weights rounded to
// bf16 in bf16 mode (upload rounds to nearest even, exactly as f32_to_bf16 does).
std::vector<Tensor> inputs_as_seen(const test::OpCase& c, DType act) {
  std::vector<Tensor> out;
  for (const auto& in : c.inputs) {
    const bool rounded = act == DType::BF16 && (in.kind == test::InputKind::Activation || in.kind == test::InputKind::Weight);
    out.push_back(rounded ? round_bf16(in.host) : in.host);
  }
  return out;
}

Tensor run_cpu(const test::OpCase& c, const std::vector<Tensor>& hosts) {
  CpuBackend cpu;
  std::vector<Tensor> in;
  for (const auto& h : hosts) in.push_back(h.dtype() == DType::I64 ? h : h.clone());
  return cpu.to_host_f32(c.run(cpu, in));
}

double nmse_vs(const Tensor& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = out.data<float>()[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? num / den : num;
}

int64_t count_non_finite(const Tensor& t) {
  int64_t n = 0;
  for (int64_t i = 0; i < t.numel(); ++i) n += !std::isfinite(t.data<float>()[i]);
  return n;
}

using test::metric;

// Naive bf16 attention as torch computes it in bf16 eager mode: Q K^T rounded to bf16, times
// the scale rounded to bf16, softmax in fp32 rounded to bf16, P V rounded to bf16.
std::vector<double> naive_bf16_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal) {
  const int64_t Lq = q.dim(0), H = q.dim(1), Dh = q.dim(2), Lk = k.dim(0), Hkv = k.dim(1);
  auto r = [](double x) { return static_cast<double>(bf16_to_f32(f32_to_bf16(static_cast<float>(x)))); };
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  std::vector<double> out(static_cast<size_t>(Lq * H * Dh)), p(static_cast<size_t>(Lk));
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / Hkv);
    for (int64_t i = 0; i < Lq; ++i) {
      const int64_t n = causal ? i + 1 : Lk;
      double mx = -1e300;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t d = 0; d < Dh; ++d) s += static_cast<double>(qp[(i * H + h) * Dh + d]) * kp[(j * Hkv + g) * Dh + d];
        p[static_cast<size_t>(j)] = r(r(s) * r(scale));
        mx = std::max(mx, p[static_cast<size_t>(j)]);
      }
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += (p[static_cast<size_t>(j)] = static_cast<float>(std::exp(p[static_cast<size_t>(j)] - mx)));
      for (int64_t j = 0; j < n; ++j) p[static_cast<size_t>(j)] = r(static_cast<float>(p[static_cast<size_t>(j)] / sum));
      for (int64_t d = 0; d < Dh; ++d) {
        double o = 0;
        for (int64_t j = 0; j < n; ++j) o += p[static_cast<size_t>(j)] * vp[(j * Hkv + g) * Dh + d];
        out[static_cast<size_t>((i * H + h) * Dh + d)] = r(o);
      }
    }
  }
  return out;
}

bool is_attention(const std::string& name) { return name.rfind("attention", 0) == 0; }
bool is_plain_attention(const std::string& name) { return name.rfind("attention_Lq", 0) == 0; }

// The bound on nmse(CUDA, CPU) for a case's output: fp32 arithmetic in a different order, or
// one bf16 rounding of the result (mean square relative error ulp^2/12: ~2.5e-6), 8x margin.
double bound_vs_cpu(DType out_dtype) { return out_dtype == DType::BF16 ? 2e-5 : 1e-9; }

std::string mode_name(const ::testing::TestParamInfo<std::tuple<DType, size_t>>& info) {
  return std::string(dtype_name(std::get<0>(info.param))) + "_" + test::all_op_cases()[std::get<1>(info.param)].name;
}

}  // namespace

// ---- every op case against the CPU backend --------------------------------------------------

class CudaOps : public ::testing::TestWithParam<std::tuple<DType, size_t>> {};

TEST_P(CudaOps, MatchesCpuBackend) {
  SKIP_WITHOUT_GPU();
  const DType act = std::get<0>(GetParam());
  const test::OpCase c = test::all_op_cases()[std::get<1>(GetParam())];
  SCOPED_TRACE(fmt::format("{} in {} mode", c.name, dtype_name(act)));
  auto be = make_backend(act);
  std::vector<Tensor> inputs = test::upload_inputs(*be, c);
  Tensor result = c.run(*be, inputs);
  ASSERT_EQ(result.device(), Device::Cuda);
  const DType out_dtype = result.dtype();
  Tensor out = be->to_host_f32(result);

  const std::vector<Tensor> seen = inputs_as_seen(c, act);
  Tensor cpu = run_cpu(c, seen);
  ASSERT_EQ(out.shape(), cpu.shape());
  EXPECT_EQ(count_non_finite(out), 0) << "unwritten (poisoned) or non-finite elements";
  const double err_cpu = test::nmse(out, cpu);
  metric(fmt::format("op.{}.{}.nmse_vs_cpu", dtype_name(act), c.name), err_cpu);

  if (is_plain_attention(c.name) && act == DType::BF16) {
    // FlashAttention's rule against float64, on the inputs the GPU saw.
    const std::vector<double> ref = c.reference(seen);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(seen[0].dim(2))));
    const bool causal = c.name.find("_causal") != std::string::npos;
    const double err = nmse_vs(out, ref);
    const std::vector<double> naive_out = naive_bf16_attention(seen[0], seen[1], seen[2], scale, causal);
    const double naive = nmse_vs(Tensor::host_f32(out.shape(), std::vector<float>(naive_out.begin(), naive_out.end())), ref);
    metric(fmt::format("op.bf16.{}.nmse_vs_f64", c.name), err);
    metric(fmt::format("op.bf16.{}.naive_bf16_nmse_vs_f64", c.name), naive);
    EXPECT_LE(err, 4.0 * naive + 1e-9) << "attention error " << err << " vs naive bf16 " << naive
                                       << " (squared errors: 2x in norm is 4x here)";
    EXPECT_LE(err_cpu, 1e-4);
  } else if (is_attention(c.name) && act == DType::BF16) {  // attention_into_: the plain cases hold the rule
    EXPECT_LE(err_cpu, 1e-4);
  } else {
    EXPECT_LE(err_cpu, bound_vs_cpu(out_dtype)) << "output " << dtype_name(out_dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, CudaOps,
                         ::testing::Combine(::testing::Values(DType::BF16, DType::F32),
                                            ::testing::Range<size_t>(0, test::all_op_cases().size())),
                         mode_name);

// ---- attention: every path at the models' shapes ----------------------------------------------

namespace {

struct AttentionCase {
  const char* name;
  int64_t Lq, Lk, H, Hkv, Dh;
  bool causal;
};

const AttentionCase kAttentionCases[] = {
    {"dit_like", 333, 317, 4, 4, 128, false},      // joint attention: cuDNN-eligible
    {"dit_heads24", 160, 150, 24, 24, 128, false},  // the real head count
    {"text_encoder_gqa", 200, 200, 28, 4, 128, true},
    {"vae_single_head", 300, 300, 1, 1, 384, false},
    {"head64", 129, 65, 2, 2, 64, false},
};

}  // namespace

class CudaAttention : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(CudaAttention, EveryPathMeetsTheFlashAttentionRule) {
  SKIP_WITHOUT_GPU();
  const AttentionCase& a = kAttentionCases[std::get<0>(GetParam())];
  const auto path = static_cast<CudaAttentionPath>(std::get<1>(GetParam()));
  SCOPED_TRACE(a.name);
  auto be = make_backend(DType::BF16, path);
  Tensor q = round_bf16(test::random_tensor({a.Lq, a.H, a.Dh}, 101, 2.0f));
  Tensor k = round_bf16(test::random_tensor({a.Lk, a.Hkv, a.Dh}, 102, 2.0f));
  Tensor v = round_bf16(test::random_tensor({a.Lk, a.Hkv, a.Dh}, 103));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.Dh)));
  const std::string sdpa_before = be->stats().sdpa_status;
  Tensor out = be->to_host_f32(be->attention(be->upload(q, DType::BF16), be->upload(k, DType::BF16),
                                             be->upload(v, DType::BF16), scale, a.causal));
  EXPECT_EQ(count_non_finite(out), 0);

  {
    CpuBackend cpu;
    Tensor r = cpu.attention(q, k, v, scale, a.causal);  // fp32 CPU, a second opinion
    const double cpu_vs = test::nmse(out, r);
    EXPECT_LE(cpu_vs, 1e-4);
  }
  const std::vector<double> ref = test::attention_f64(q, k, v, scale, a.causal);  // float64
  const std::vector<double> naive_d = naive_bf16_attention(q, k, v, scale, a.causal);
  const double naive = nmse_vs(Tensor::host_f32(out.shape(), std::vector<float>(naive_d.begin(), naive_d.end())), ref);
  const double err = nmse_vs(out, ref);
  const CudaBackendStats st = be->stats();
  const char* ran = st.attention_cudnn ? "cudnn" : st.attention_flash ? "flash" : "gemm";
  const char* asked = path == CudaAttentionPath::Cudnn ? "cudnn" : path == CudaAttentionPath::Flash ? "flash" : "gemm";
  metric(fmt::format("attention.{}.asked_{}.ran_{}.nmse_vs_f64", a.name, asked, ran), err);
  metric(fmt::format("attention.{}.naive_bf16_nmse_vs_f64", a.name), naive);
  EXPECT_LE(err, 4.0 * naive + 1e-9) << "path " << ran << ": error " << err << ", naive bf16 " << naive;

  if (path == CudaAttentionPath::Cudnn) {
    const bool eligible = !a.causal && a.H == a.Hkv && a.Dh % 8 == 0 && a.Dh <= 128;
    if (eligible && sdpa_before.rfind("available", 0) == 0) {
      EXPECT_EQ(st.attention_cudnn, 1) << "cuDNN SDPA was available but did not run: " << st.sdpa_status;
    }
    std::printf("[cuda-info] cuDNN SDPA for %s: %s, ran %s\n", a.name, st.sdpa_status.c_str(), ran);
  }
  if (path == CudaAttentionPath::Flash) {
    EXPECT_EQ(st.attention_flash, 1);
  }
  if (path == CudaAttentionPath::Gemm) {
    EXPECT_EQ(st.attention_gemm, 1);
  }
}

namespace {
std::string attention_test_name(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  static const char* const paths[] = {"auto", "cudnn", "gemm", "flash"};
  return std::string(kAttentionCases[std::get<0>(info.param)].name) + "_" + paths[std::get<1>(info.param)];
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(PathsAndShapes, CudaAttention,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kAttentionCases))),
                                            ::testing::Values(static_cast<int>(CudaAttentionPath::Cudnn),
                                                              static_cast<int>(CudaAttentionPath::Gemm),
                                                              static_cast<int>(CudaAttentionPath::Flash))),
                         attention_test_name);

// The VAE's mid-block attention at 1024^2 (16,384 tokens, one 384-wide head): the GEMM path
// works in two query chunks; the flash kernel is an independent algorithm to compare with.
TEST(CudaAttentionLarge, ChunkedGemmPathAgreesWithFlashKernel) {
  SKIP_WITHOUT_GPU();
  const int64_t L = 16384, Dh = 384;
  auto be = make_backend(DType::BF16, CudaAttentionPath::Gemm);
  Tensor q = be->upload(test::random_tensor({L, 1, Dh}, 201, 2.0f), DType::BF16);
  Tensor k = be->upload(test::random_tensor({L, 1, Dh}, 202, 2.0f), DType::BF16);
  Tensor v = be->upload(test::random_tensor({L, 1, Dh}, 203), DType::BF16);
  const float scale = static_cast<float>(1.0 / std::sqrt(384.0));
  Tensor by_gemm = be->to_host_f32(be->attention(q, k, v, scale, false));
  be->set_attention_path(CudaAttentionPath::Flash);
  Tensor by_flash = be->to_host_f32(be->attention(q, k, v, scale, false));
  EXPECT_EQ(count_non_finite(by_gemm), 0);
  EXPECT_EQ(count_non_finite(by_flash), 0);
  const double err = test::nmse(by_gemm, by_flash);
  metric("attention.vae_1024.gemm_vs_flash_nmse", err);
  EXPECT_LE(err, 1e-4);
}

// ---- convolution: both paths at the VAE's channel counts ------------------------------------

namespace {
struct ConvCase {
  const char* name;
  int64_t H, W, Cin, Cout;
};
const ConvCase kConvCases[] = {
    {"small", 16, 9, 16, 8},
    {"vae_conv_in", 24, 20, 16, 384},  // z 16 -> 384 at the latent resolution
    {"vae_96", 64, 48, 96, 96},         // the last up block's width
    {"vae_conv_out", 20, 12, 96, 3},    // 3 output channels: im2col even when cuDNN is asked for
};
}  // namespace

class CudaConv : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(CudaConv, EveryPathMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const ConvCase& c = kConvCases[std::get<0>(GetParam())];
  const auto path = static_cast<CudaConvPath>(std::get<1>(GetParam()));
  SCOPED_TRACE(c.name);
  auto be = make_backend(DType::BF16);
  be->set_conv_path(path);
  Tensor x = round_bf16(test::random_tensor({c.H, c.W, c.Cin}, 301, 3.0f));
  Tensor w = round_bf16(test::random_tensor({c.Cout, 9 * c.Cin}, 302, 0.3f));
  Tensor b = round_bf16(test::random_tensor({c.Cout}, 303));
  const std::string before = be->stats().conv_status;
  Tensor out = be->to_host_f32(be->conv2d_3x3(be->upload(x, DType::BF16), be->upload_weight(w), be->upload_weight(b)));
  EXPECT_EQ(count_non_finite(out), 0) << "unwritten (poisoned) or non-finite elements";
  CpuBackend cpu;
  const double err = test::nmse(out, cpu.conv2d_3x3(x, w, b));
  const CudaBackendStats st = be->stats();
  const char* ran = st.conv_cudnn ? "cudnn" : "im2col";
  metric(fmt::format("conv.{}.asked_{}.ran_{}.nmse_vs_cpu", c.name, path == CudaConvPath::Cudnn ? "cudnn" : "im2col",
                     ran),
         err);
  EXPECT_LE(err, bound_vs_cpu(DType::BF16)) << "path " << ran;
  if (path == CudaConvPath::Cudnn) {
    if (c.Cin % 8 == 0 && c.Cout % 8 == 0 && before.rfind("available", 0) == 0) {
      EXPECT_EQ(st.conv_cudnn, 1) << "cuDNN convolution was available but did not run: " << st.conv_status;
    }
    std::printf("[cuda-info] cuDNN convolution for %s: %s, ran %s\n", c.name, st.conv_status.c_str(), ran);
  } else {
    EXPECT_EQ(st.conv_im2col, 1);
  }
}

namespace {
std::string conv_test_name(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  return std::string(kConvCases[std::get<0>(info.param)].name) + "_" +
         (std::get<1>(info.param) == static_cast<int>(CudaConvPath::Cudnn) ? "cudnn" : "im2col");
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(PathsAndShapes, CudaConv,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kConvCases))),
                                            ::testing::Values(static_cast<int>(CudaConvPath::Cudnn),
                                                              static_cast<int>(CudaConvPath::Im2col))),
                         conv_test_name);

// ---- GEMMs ----------------------------------------------------------------------------------

TEST(CudaGemm, CublasLtMatchesCpuAndTheReferenceKernel) {
  SKIP_WITHOUT_GPU();
  struct Shape3 {
    int64_t M, K, N;
  };
  for (const Shape3 s : {Shape3{256, 3072, 384}, Shape3{77, 3584, 96}, Shape3{513, 64, 200}, Shape3{3, 16, 3}}) {
    SCOPED_TRACE(fmt::format("M {} K {} N {}", s.M, s.K, s.N));
    Tensor x = round_bf16(test::random_tensor({s.M, s.K}, 301));
    Tensor w = round_bf16(test::random_tensor({s.N, s.K}, 302, 0.05f));
    Tensor b = round_bf16(test::random_tensor({s.N}, 303));
    CpuBackend cpu;
    Tensor ref = cpu.linear(x, w, &b);
    Tensor ref_gelu = cpu.gelu_tanh(ref);
    for (const bool reference_kernel : {false, true}) {
      CudaBackendOptions o = CudaBackendOptions::from_env(0);
      o.poison = true;
      o.reference_gemm = reference_kernel;
      CudaBackend be(o, Log(0, 1, "warn"));
      Tensor xd = be.upload(x, DType::BF16), wd = be.upload_weight(w), bd = be.upload_weight(b);
      Tensor y_bf16 = be.to_host_f32(be.linear(xd, wd, &bd, DType::BF16));
      Tensor y_f32 = be.to_host_f32(be.linear(xd, wd, &bd, DType::F32));
      Tensor y_gelu = be.to_host_f32(be.linear_gelu(xd, wd, bd));
      Tensor y_f32_in = be.to_host_f32(be.linear(be.upload(x, DType::F32), wd, &bd, DType::F32));  // x converted
      const std::string tag = reference_kernel ? "reference" : "cublaslt";
      metric(fmt::format("gemm.{}.M{}K{}N{}.bf16_out_nmse", tag, s.M, s.K, s.N), test::nmse(y_bf16, ref));
      EXPECT_EQ(count_non_finite(y_bf16) + count_non_finite(y_f32) + count_non_finite(y_gelu), 0) << tag;
      EXPECT_LE(test::nmse(y_bf16, ref), 1e-5) << tag;
      EXPECT_LE(test::nmse(y_f32, ref), 1e-9) << tag;
      EXPECT_LE(test::nmse(y_f32_in, ref), 1e-9) << tag;
      EXPECT_LE(test::nmse(y_gelu, ref_gelu), 2e-5) << tag << " (GELU_BIAS epilogue)";
    }
  }
}

// ---- the dtype combinations the models pass ----------------------------------------------------

TEST(CudaDtypes, TheModelsCombinations) {
  SKIP_WITHOUT_GPU();
  auto be = make_backend(DType::BF16);
  CpuBackend cpu;
  const int64_t R = 19, C = 256;
  Tensor xf = test::random_tensor({R, C}, 401, 50.0f);  // an f32 residual stream
  Tensor shift = test::random_tensor({C}, 402), scale = test::random_tensor({C}, 403);
  Tensor gain = round_bf16(test::random_tensor({C}, 404));
  Tensor xd = be->upload(xf, DType::F32);

  // layer_norm_modulate: f32 x, f32 shift/scale (modulation rows) -> bf16
  Tensor ln = be->layer_norm_modulate(xd, be->upload(shift, DType::F32), be->upload(scale, DType::F32), 1e-6f);
  EXPECT_EQ(ln.dtype(), DType::BF16);
  EXPECT_LE(test::nmse(be->to_host_f32(ln), cpu.layer_norm_modulate(xf, shift, scale, 1e-6f)), 1e-5);
  // rms_norm: f32 x (text embeddings, text-encoder residual), bf16 weight -> bf16
  Tensor rn = be->rms_norm(xd, be->upload_weight(gain), 1e-6f);
  EXPECT_EQ(rn.dtype(), DType::BF16);
  EXPECT_LE(test::nmse(be->to_host_f32(rn), cpu.rms_norm(xf, gain, 1e-6f)), 1e-5);
  // gated_add_: f32 x += f32 gate * f32 y (y from linear(..., F32))
  Tensor y = test::random_tensor({R, C}, 405);
  Tensor xg = be->upload(xf, DType::F32);
  be->gated_add_(xg, be->upload(shift, DType::F32), be->upload(y, DType::F32));
  Tensor xc = xf.clone();
  cpu.gated_add_(xc, shift, y);
  EXPECT_LE(test::nmse(be->to_host_f32(xg), xc), 1e-14);
  // silu of an f32 tensor stays f32 (the timestep embedding)
  EXPECT_EQ(be->silu(xd).dtype(), DType::F32);
  // copy_rows_ between dtypes, at a row offset
  Tensor dst = be->empty({R + 5, C}, DType::F32);
  be->copy_rows_(dst, 0, be->upload(test::random_tensor({5, C}, 406), DType::F32));
  be->copy_rows_(dst, 5, be->upload(xf, DType::BF16));
  Tensor back = be->to_host_f32(dst);
  EXPECT_EQ(count_non_finite(back), 0);
  EXPECT_LE(test::nmse(back.slice0(5, R + 5), round_bf16(xf)), 1e-14);
  // to_host_f32 of integers
  Tensor ids = Tensor::host({4}, DType::I64);
  for (int i = 0; i < 4; ++i) ids.data<int64_t>()[i] = 7 * i - 3;
  Tensor ids_back = be->to_host_f32(be->upload(ids, DType::I64));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ids_back.data<float>()[i], static_cast<float>(7 * i - 3));
  // add_: bf16 += bf16 (VAE), f32 += f32 (text encoder)
  Tensor a16 = be->upload(xf, DType::BF16);
  be->add_(a16, be->upload(y, DType::BF16));
  Tensor expect16 = round_bf16(xf);
  cpu.add_(expect16, round_bf16(y));
  EXPECT_LE(test::nmse(be->to_host_f32(a16), expect16), 1e-5);
}

TEST(CudaDtypes, UnsupportedCombinationsFailNamingTheOp) {
  SKIP_WITHOUT_GPU();
  auto be = make_backend(DType::BF16);
  Tensor x16 = be->upload(test::random_tensor({4, 8}, 501), DType::BF16);
  auto expect_error = [](auto&& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { be->euler_step_(x16, x16, 0.1f); }, "euler_step_");
  Tensor x3 = be->upload(test::random_tensor({4, 2, 8}, 502), DType::BF16);
  Tensor cs16 = be->upload(test::random_tensor({4, 4}, 503), DType::BF16);
  expect_error([&] { be->rope_interleaved_(x3, cs16, cs16); }, "rope_interleaved_");
  Tensor ids = be->upload(Tensor::host({4, 8}, DType::I32), DType::I32);
  expect_error([&] { be->linear(ids, x16); }, "linear");
  expect_error([&] { be->silu(test::random_tensor({3}, 504)); }, "silu");  // a host tensor
  Tensor q32 = be->upload(test::random_tensor({4, 2, 8}, 505), DType::F32);
  expect_error([&] { be->attention(q32, x3, x3, 1.0f, false); }, "attention");
}

// The shared shape contract (src/core/op_shapes.h), the same mistakes as on the CPU.
TEST(CudaShapeMistakes, EachRefusedNamingTheOp) {
  SKIP_WITHOUT_GPU();
  for (DType act : {DType::BF16, DType::F32}) {
    auto be = make_backend(act);
    for (const test::ShapeMistake& mistake : test::all_shape_mistakes())
      EXPECT_EQ(test::shape_mistake_failure(*be, mistake), "") << mistake.name << " in " << dtype_name(act) << " mode";
  }
}

// The pipeline's NaN guard: every planted NaN / Inf found, in f32 and in bf16 storage (the
// huge finite value stays finite in bf16), over one block and over many.
TEST(CudaOps, CountNonfiniteFindsThePlantedValues) {
  SKIP_WITHOUT_GPU();
  auto be = make_backend(DType::BF16);
  for (const auto& c : test::nonfinite_cases())
    for (DType dtype : {DType::F32, DType::BF16})
      EXPECT_EQ(be->count_nonfinite(be->upload(c.host, dtype)), c.expected) << c.name << " in " << dtype_name(dtype);
}

// ---- memory ---------------------------------------------------------------------------------

TEST(CudaMemory, PoisonFillsNewAllocationsWithNaN) {
  SKIP_WITHOUT_GPU();
  auto be = make_backend(DType::BF16);
  for (DType t : {DType::F32, DType::BF16}) {
    Tensor e = be->to_host_f32(be->empty({3, 5}, t));
    EXPECT_EQ(count_non_finite(e), 15) << dtype_name(t);
  }
}

TEST(CudaMemory, SteadyStateMakesNoDeviceAllocations) {
  SKIP_WITHOUT_GPU();
  auto be = make_backend(DType::BF16);
  Tensor w = be->upload_weight(test::random_tensor({96, 64}, 601, 0.1f));
  Tensor b = be->upload_weight(test::random_tensor({96}, 602));
  Tensor g = be->upload_weight(test::random_tensor({96}, 603));
  auto step = [&] {
    Tensor x = be->upload(test::random_tensor({300, 64}, 604), DType::BF16);
    Tensor h = be->rms_norm(be->linear(x, w, &b), g, 1e-6f);
    Tensor q = h.view({300, 3, 32});
    Tensor o = be->attention(q, q, q, 0.17f, false);
    be->synchronize();
  };
  step();
  const int64_t after_first = be->stats().device_mallocs;
  for (int i = 0; i < 3; ++i) step();
  metric("memory.device_mallocs_after_first_step", static_cast<double>(after_first));
  EXPECT_EQ(be->stats().device_mallocs, after_first) << "cudaMalloc in steady state";
}

// Released weights (a model freed, as --offload-text-encoder frees the text encoder) go back
// to the device instead of staying in the cache, so the next model's weights fit beside less.
TEST(CudaMemory, FreedWeightsGoBackToTheDevice) {
  SKIP_WITHOUT_GPU();
  auto be = make_backend(DType::BF16);
  const size_t before = be->stats().bytes_reserved;
  {
    Tensor w = be->upload_weight(test::random_tensor({1024, 1024}, 611, 0.1f));  // 2 MiB in bf16
    EXPECT_GE(be->stats().bytes_reserved, before + (size_t{2} << 20));
  }
  EXPECT_EQ(be->stats().bytes_reserved, before) << "a freed weight stayed reserved";
  Tensor a = be->upload(test::random_tensor({1024, 1024}, 612), DType::BF16);  // an activation
  const size_t with_activation = be->stats().bytes_reserved;
  a = Tensor();
  EXPECT_EQ(be->stats().bytes_reserved, with_activation) << "activations stay cached for reuse";
}

#endif  // DITBATCH_HAVE_CUDA
