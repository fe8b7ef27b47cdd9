// Every Backend op on CUDA against the CPU backend (ggml's test-backend-ops): each case of
// src/selftest/op_cases.cpp in bf16 mode (the fast path) and in f32 mode (every kernel held to fp32
// rounding), with every device allocation poisoned (0xFF bytes = NaN) so that an element a
// kernel leaves unwritten fails the finiteness check; attention in bf16 is also held to
// FlashAttention's rule (selftest::check_op_case, which `ditbatch selftest` runs too).
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
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#ifdef DITBATCH_CUDA_EMULATION
#include <cuda_runtime.h>  // the emulation's: emuFailNextFree
#endif

#include "app/cuda_checks.h"
#include "cuda_test_util.h"
#ifndef DITBATCH_CUDA_EMULATION
#include "gemm_preference.h"
#endif
#include "launch.h"
#include "selftest/op_cases.h"
#include "selftest/op_check.h"
#include "test_util.h"

using namespace ditbatch;

namespace {

std::unique_ptr<CudaBackend> make_backend(DType act, std::optional<CudaAttentionPath> attention = std::nullopt) {
  return test::make_cuda_test_backend(act, true, attention);
}

using test::metric;

int64_t count_non_finite(const Tensor& t) {
  int64_t n = 0;
  for (int64_t i = 0; i < t.numel(); ++i) n += !std::isfinite(t.data<float>()[i]);
  return n;
}

std::string mode_name(const ::testing::TestParamInfo<std::tuple<DType, size_t>>& info) {
  return std::string(dtype_name(std::get<0>(info.param))) + "_" + selftest::all_op_cases()[std::get<1>(info.param)].name;
}

}  // namespace

// ---- every op case against the CPU backend --------------------------------------------------

class CudaOps : public ::testing::TestWithParam<std::tuple<DType, size_t>> {};

TEST_P(CudaOps, MatchesCpuBackend) {
  SKIP_WITHOUT_GPU();
  const DType act = std::get<0>(GetParam());
  const selftest::OpCase c = selftest::all_op_cases()[std::get<1>(GetParam())];
  auto be = make_backend(act);
  const selftest::OpCheck r = selftest::check_op_case(*be, c);
  metric(fmt::format("op.{}.{}.nmse_vs_cpu", r.mode, c.name), r.error);
  if (r.error_vs_f64 >= 0) {
    metric(fmt::format("op.{}.{}.nmse_vs_f64", r.mode, c.name), r.error_vs_f64);
    metric(fmt::format("op.{}.{}.naive_bf16_nmse_vs_f64", r.mode, c.name), r.naive_bf16_vs_f64);
  }
  EXPECT_EQ(r.reference, "cpu");
  EXPECT_TRUE(r.passed()) << c.name << " in " << dtype_name(act) << " mode: " << r.failure;
}

INSTANTIATE_TEST_SUITE_P(AllOps, CudaOps,
                         ::testing::Combine(::testing::Values(DType::BF16, DType::F32),
                                            ::testing::Range<size_t>(0, selftest::all_op_cases().size())),
                         mode_name);

// ---- attention: every path at the models' shapes (app/cuda_checks, which selftest runs) --------

class CudaAttention : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(CudaAttention, EveryPathMeetsTheFlashAttentionRule) {
  SKIP_WITHOUT_GPU();
  const AttentionPathCase& a = attention_path_cases()[static_cast<size_t>(std::get<0>(GetParam()))];
  const auto path = static_cast<CudaAttentionPath>(std::get<1>(GetParam()));
  const PathCheck r = check_attention_path(test::cuda_test_options(), a, path);
  metric(fmt::format("attention.{}.asked_{}.ran_{}.nmse_vs_f64", a.name, attention_path_name(path), r.ran), r.error);
  metric(fmt::format("attention.{}.naive_bf16_nmse_vs_f64", a.name), r.naive_bf16);
  if (path == CudaAttentionPath::Cudnn)
    std::printf("[cuda-info] cuDNN SDPA for %s: %s, ran %s\n", a.name, r.status_after.c_str(), r.ran.c_str());
  EXPECT_TRUE(r.failure.empty()) << a.name << " via " << attention_path_name(path) << ": " << r.failure;
}

namespace {
std::string attention_test_name(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  return std::string(attention_path_cases()[static_cast<size_t>(std::get<0>(info.param))].name) + "_" +
         attention_path_name(static_cast<CudaAttentionPath>(std::get<1>(info.param)));
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(PathsAndShapes, CudaAttention,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(attention_path_cases().size())),
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

// ---- convolution: both paths at the VAE's channel counts (app/cuda_checks) ------------------

class CudaConv : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(CudaConv, EveryPathMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const ConvPathCase& c = conv_path_cases()[static_cast<size_t>(std::get<0>(GetParam()))];
  const auto path = static_cast<CudaConvPath>(std::get<1>(GetParam()));
  const PathCheck r = check_conv_path(test::cuda_test_options(), c, path);
  metric(fmt::format("conv.{}.asked_{}.ran_{}.nmse_vs_cpu", c.name, conv_path_name(path), r.ran), r.error);
  if (path == CudaConvPath::Cudnn)
    std::printf("[cuda-info] cuDNN convolution for %s: %s, ran %s\n", c.name, r.status_after.c_str(), r.ran.c_str());
  EXPECT_TRUE(r.failure.empty()) << c.name << " via " << conv_path_name(path) << ": " << r.failure;
}

namespace {
std::string conv_test_name(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  return std::string(conv_path_cases()[static_cast<size_t>(std::get<0>(info.param))].name) + "_" +
         conv_path_name(static_cast<CudaConvPath>(std::get<1>(info.param)));
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(PathsAndShapes, CudaConv,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(conv_path_cases().size())),
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
    Tensor x = selftest::round_bf16(test::random_tensor({s.M, s.K}, 301));
    Tensor w = selftest::round_bf16(test::random_tensor({s.N, s.K}, 302, 0.05f));
    Tensor b = selftest::round_bf16(test::random_tensor({s.N}, 303));
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

// More output columns than one grid side holds (65535 blocks of 16): the im2col GEMM of a
// megapixel image's convolution (n = its pixel count) on the reference kernel, which the
// emulation's cuBLASLt is, and which a GPU falls back on when cuBLASLt offers no algorithm.
TEST(CudaGemm, TheReferenceKernelTakesMoreColumnsThanAGridSide) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = int64_t{65535} * 16 + 40, K = 4, N = 3;  // linear: the GEMM's n is the rows of x
  const Tensor x = selftest::round_bf16(test::random_tensor({rows, K}, 311));
  const Tensor w = selftest::round_bf16(test::random_tensor({N, K}, 312));
  CpuBackend cpu;
  const Tensor ref = cpu.linear(x, w, nullptr);
  CudaBackendOptions o = CudaBackendOptions::from_env(0);
  o.reference_gemm = true;
  CudaBackend be(o, Log(0, 1, "warn"));
  const Tensor y = be.to_host_f32(be.linear(be.upload(x, DType::BF16), be.upload_weight(w), nullptr, DType::F32));
  EXPECT_LE(test::nmse(y, ref), 1e-9);
  // the last rows, past the first launch's columns, are there
  const Tensor tail = y.slice0(rows - 40, rows), ref_tail = ref.slice0(rows - 40, rows);
  EXPECT_LE(test::nmse(tail, ref_tail), 1e-9);
}

#ifndef DITBATCH_CUDA_EMULATION  // the emulation has no cuBLASLt
// The heuristic's results are filtered by their own configuration too (a second line of
// defence should a cuBLASLt ignore the mask): an algorithm whose configuration reduces in the
// output type is never used. Algorithms are made from cuBLASLt's own ids (its handle needs a
// GPU; the mask itself is read back without one: tests/cudnn/test_cublaslt_preference.cpp).
TEST(CudaGemm, AnAlgorithmReducingInTheOutputTypeIsRefused) {
  SKIP_WITHOUT_GPU();
  cublasLtHandle_t handle = nullptr;
  ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  int ids[64] = {};
  int found = 0;
  ASSERT_EQ(cublasLtMatmulAlgoGetIds(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                                     CUDA_R_16BF, 64, ids, &found),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_GT(found, 0);
  int checked = 0;
  for (int i = 0; i < found; ++i) {
    cublasLtMatmulAlgo_t algo{};
    if (cublasLtMatmulAlgoInit(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                               CUDA_R_16BF, ids[i], &algo) != CUBLAS_STATUS_SUCCESS)
      continue;
    for (const uint32_t scheme : {CUBLASLT_REDUCTION_SCHEME_NONE, CUBLASLT_REDUCTION_SCHEME_INPLACE,
                                  CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE}) {
      if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof scheme) !=
          CUBLAS_STATUS_SUCCESS)
        continue;
      const bool fp32 = scheme == CUBLASLT_REDUCTION_SCHEME_NONE || scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      EXPECT_EQ(cuda::gemm_reduction_allowed(algo), fp32) << "algorithm id " << ids[i] << ", reduction scheme " << scheme;
      ++checked;
    }
  }
  cublasLtDestroy(handle);
  EXPECT_GT(checked, 0) << "cuBLASLt made no algorithm to configure";
}
#endif

// ---- the dtype combinations the models pass ----------------------------------------------------

TEST(CudaDtypes, TheModelsCombinations) {
  SKIP_WITHOUT_GPU();
  auto be = make_backend(DType::BF16);
  CpuBackend cpu;
  const int64_t R = 19, C = 256;
  Tensor xf = test::random_tensor({R, C}, 401, 50.0f);  // an f32 residual stream
  Tensor shift = test::random_tensor({C}, 402), scale = test::random_tensor({C}, 403);
  Tensor gain = selftest::round_bf16(test::random_tensor({C}, 404));
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
  // copy_ between dtypes, into a range of rows
  Tensor dst = be->empty({R + 5, C}, DType::F32);
  be->copy_(dst.slice0(0, 5), be->upload(test::random_tensor({5, C}, 406), DType::F32));
  be->copy_(dst.slice0(5, R + 5), be->upload(xf, DType::BF16));
  Tensor back = be->to_host_f32(dst);
  EXPECT_EQ(count_non_finite(back), 0);
  EXPECT_LE(test::nmse(back.slice0(5, R + 5), selftest::round_bf16(xf)), 1e-14);
  // to_host_f32 of integers
  Tensor ids = Tensor::host({4}, DType::I64);
  for (int i = 0; i < 4; ++i) ids.data<int64_t>()[i] = 7 * i - 3;
  Tensor ids_back = be->to_host_f32(be->upload(ids, DType::I64));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ids_back.data<float>()[i], static_cast<float>(7 * i - 3));
  // add_: bf16 += bf16 (VAE), f32 += f32 (text encoder)
  Tensor a16 = be->upload(xf, DType::BF16);
  be->add_(a16, be->upload(y, DType::BF16));
  Tensor expect16 = selftest::round_bf16(xf);
  cpu.add_(expect16, selftest::round_bf16(y));
  EXPECT_LE(test::nmse(be->to_host_f32(a16), expect16), 1e-5);
}

// A weight is stored in the backend's weight dtype, whatever the host tensor's (a bf16 file's
// tensors go up as bf16, an f32 one's are converted): what the memory plan counts.
TEST(CudaDtypes, WeightsAreStoredInTheWeightDtype) {
  SKIP_WITHOUT_GPU();
  const auto as_bf16 = [](const Tensor& f32) {
    Tensor t = Tensor::host(f32.shape(), DType::BF16);
    convert_from_f32(f32.data<float>(), t.raw(), DType::BF16, f32.numel());
    return t;
  };
  const Tensor host = test::random_tensor({8, 16}, 631);
  for (DType mode : {DType::BF16, DType::F32}) {
    auto be = make_backend(mode);
    EXPECT_EQ(be->weight_dtype(), mode) << dtype_name(mode);
    for (const Tensor& from : {host, as_bf16(host)}) {
      const Tensor w = be->upload_weight(from);
      EXPECT_EQ(w.dtype(), be->weight_dtype()) << dtype_name(mode) << " from " << dtype_name(from.dtype());
      const Tensor expected = (mode == DType::BF16 ? as_bf16(from.to_f32()) : from).to_f32();
      const Tensor back = be->to_host_f32(w);
      EXPECT_EQ(std::memcmp(back.raw(), expected.raw(), expected.nbytes()), 0)
          << dtype_name(mode) << " from " << dtype_name(from.dtype());
    }
  }
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
  expect_error([&] { be->axpy_(x16, 0.1f, x16); }, "axpy_");
  Tensor x3 = be->upload(test::random_tensor({4, 2, 8}, 502), DType::BF16);
  Tensor cs16 = be->upload(test::random_tensor({4, 4}, 503), DType::BF16);
  expect_error([&] { be->rope_interleaved_(x3, cs16, cs16); }, "rope_interleaved_");
  Tensor ids = be->upload(Tensor::host({4, 8}, DType::I32), DType::I32);
  expect_error([&] { be->linear(ids, x16); }, "linear");
  expect_error([&] { be->silu(test::random_tensor({3}, 504)); }, "silu");  // a host tensor
  Tensor q32 = be->upload(test::random_tensor({4, 2, 8}, 505), DType::F32);
  expect_error([&] { be->attention(q32, x3, x3, 1.0f, false); }, "attention");
  Tensor w18 = be->upload_weight(test::random_tensor({3, 18}, 506));
  Tensor b3 = be->upload_weight(test::random_tensor({3}, 507));
  Tensor image_i32 = be->upload(Tensor::host({4, 4, 2}, DType::I32), DType::I32);
  expect_error([&] { be->conv2d_3x3_stride2(image_i32, w18, b3); }, "conv2d_3x3_stride2");
  expect_error([&] { be->conv2d_3x3_stride2(test::random_tensor({4, 4, 2}, 508), w18, b3); }, "conv2d_3x3_stride2");
}

// The shared shape contract (src/core/op_shapes.h), the same mistakes as on the CPU.
TEST(CudaShapeMistakes, EachRefusedNamingTheOp) {
  SKIP_WITHOUT_GPU();
  for (DType act : {DType::BF16, DType::F32}) {
    auto be = make_backend(act);
    for (const selftest::ShapeMistake& mistake : selftest::all_shape_mistakes())
      EXPECT_EQ(selftest::shape_mistake_failure(*be, mistake), "") << mistake.name << " in " << dtype_name(act) << " mode";
  }
}

// The pipeline's NaN guard: every planted NaN / Inf found, in f32 and in bf16 storage (the
// huge finite value stays finite in bf16), over one block and over many.
TEST(CudaOps, CountNonfiniteFindsThePlantedValues) {
  SKIP_WITHOUT_GPU();
  auto be = make_backend(DType::BF16);
  for (const auto& c : selftest::nonfinite_cases())
    for (DType dtype : {DType::F32, DType::BF16})
      EXPECT_EQ(be->count_nonfinite(be->upload(c.host, dtype)), c.expected) << c.name << " in " << dtype_name(dtype);
}

// The two words a padded cuDNN SDPA call reads its real lengths from: where the graph's
// int32 tensors point (16 bytes apart), written on the stream; bad arguments refused.
TEST(CudaKernels, SequenceLengthsLandWhereThePaddedSdpaReadsThem) {
  SKIP_WITHOUT_GPU();
  cuda::CudaContext ctx;
  ctx.sync_each_op = true;
  int32_t* words = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&words), 2 * cuda::kSeqLenStride * sizeof(int32_t)), cudaSuccess);
  std::vector<int32_t> host(2 * cuda::kSeqLenStride, -1);
  ASSERT_EQ(cudaMemcpy(words, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
  cuda::set_sequence_lengths(ctx, words, 4116, 4108);
  ASSERT_EQ(cudaMemcpy(host.data(), words, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host[0], 4116);
  EXPECT_EQ(host[cuda::kSeqLenStride], 4108);
  EXPECT_EQ(host[1], -1) << "a word between the two tensors was written";
  EXPECT_THROW(cuda::set_sequence_lengths(ctx, words + 1, 5, 5), std::exception);  // not 16-byte aligned
  EXPECT_THROW(cuda::set_sequence_lengths(ctx, words, 0, 5), std::exception);
  EXPECT_THROW(cuda::set_sequence_lengths(ctx, words, 5, int64_t{1} << 31), std::exception);
  cudaFree(words);
}

// The flash kernel above 48 KiB of shared memory (Dh 384, the VAE's head) on each device of the
// process in turn: cudaFuncSetAttribute acts on the current device only, so an opt-in
// remembered per process would leave the second device's launch refused. (The emulation has
// two devices and keeps the opt-in per device, as a GPU does.)
TEST(CudaKernels, FlashSharedMemoryOptInHoldsOnEveryDevice) {
  SKIP_WITHOUT_GPU();
  if (cuda_device_count() < 2) GTEST_SKIP() << "one device: " << cuda_describe_devices();
  const int64_t L = 40, Dh = 384;
  const Tensor q = test::random_tensor({L, 1, Dh}, 231, 2.0f), k = test::random_tensor({L, 1, Dh}, 232, 2.0f),
               v = test::random_tensor({L, 1, Dh}, 233);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));
  CpuBackend cpu;
  const Tensor expected = cpu.attention(q, k, v, scale, false);
  for (int device = 0; device < 2; ++device) {
    SCOPED_TRACE(fmt::format("device {}", device));
    CudaBackendOptions o = test::cuda_test_options(DType::F32);
    o.device = device;
    o.attention = CudaAttentionPath::Flash;
    CudaBackend be(o, Log(0, 1, "warn"));
    const Tensor got = be.to_host_f32(be.attention(be.upload(q, DType::F32), be.upload(k, DType::F32),
                                                   be.upload(v, DType::F32), scale, false));
    EXPECT_EQ(be.stats().attention_flash, 1);
    EXPECT_LE(test::nmse(got, expected), 1e-10);
  }
  cudaSetDevice(0);  // as the other tests expect to find it
}

#ifdef DITBATCH_CUDA_EMULATION
// A library call (cuBLASLt, cuDNN) is judged by the status it returns: an error pending from
// earlier work is said as that work's before the call, and one the library leaves behind is
// not blamed on our next launch. (Emulation only: it makes a pending error on purpose.)
TEST(CudaKernels, LibraryCallsAreNotBlamedForAPendingError) {
  cuda::CudaContext ctx;
  std::vector<std::string> warnings;
  ctx.warn = [&](const std::string& message) { warnings.push_back(message); };
  auto leave_pending_error = [] {
    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
    emuFailNextFree(cudaErrorInvalidValue);
    cudaFree(p);
  };
  // What the protocol prevents: a plain launch check takes whatever is pending as its own.
  leave_pending_error();
  EXPECT_THROW(ctx.launched("an innocent kernel"), Error);

  leave_pending_error();
  ctx.library_call_starts("linear (cuBLASLt)");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("cudaErrorInvalidValue"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("not by linear (cuBLASLt)"), std::string::npos) << warnings[0];
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the earlier error was left for the call to be blamed for";

  for (const bool sync : {false, true}) {
    ctx.sync_each_op = sync;
    ctx.library_call_starts("attention (cuDNN SDPA)");
    leave_pending_error();  // as a library may leave one behind while returning success
    EXPECT_NO_THROW(ctx.library_call_done("attention (cuDNN SDPA)"));
    EXPECT_NO_THROW(ctx.launched("the next kernel"));
  }
  EXPECT_EQ(warnings.size(), 1u) << "a clean start was reported as a pending error";
}
#endif

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

#ifdef DITBATCH_CUDA_EMULATION
// A cudaFree that fails where nothing may throw (a weight freed in a destructor) is reported by
// the next checked call, naming cudaFree, instead of staying in CUDA's error state to be blamed
// on the next kernel launch; after it, the backend works on. (Emulation only: a real GPU's
// cudaFree cannot be made to fail on purpose.)
TEST(CudaMemory, AFailedFreeIsReportedNamingIt) {
  auto be = make_backend(DType::BF16);
  {
    Tensor w = be->upload_weight(test::random_tensor({1024, 1024}, 621, 0.1f));  // exact: freed to the device
    emuFailNextFree(cudaErrorInvalidValue);
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the error was left for the next launch";
  try {
    be->synchronize();
    ADD_FAILURE() << "the failed cudaFree was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cudaFree of a weight failed"), std::string::npos) << e.what();
  }
  Tensor x = be->upload(test::random_tensor({4, 8}, 622), DType::BF16);
  EXPECT_EQ(count_non_finite(be->to_host_f32(be->silu(x))), 0);
}
#endif

#endif  // DITBATCH_HAVE_CUDA
