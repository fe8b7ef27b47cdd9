// The matmul preference cuBLASLt chooses every GEMM's algorithm under, read back without a GPU:
// split-K partial sums are added in fp32 or not at all. cuBLASLt's default allows every
// reduction scheme, including the two that add partial sums in the output type (bf16), which
// its heuristic picks for small-M, large-K shapes (the text stream, the text encoder).
#include <gtest/gtest.h>

#include <cstdint>

#include "gemm_preference.h"

using namespace ditbatch::cuda;

namespace {

template <typename T>
T read_back(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attribute) {
  T value{};
  size_t written = 0;
  EXPECT_EQ(cublasLtMatmulPreferenceGetAttribute(pref, attribute, &value, sizeof value, &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(written, sizeof value);
  return value;
}

}  // namespace

TEST(CublasLtPreference, AllowsNoReductionInTheOutputType) {
  const GemmPreference pref = make_gemm_preference(uint64_t{32} << 20, 16, 256, 64, "test GEMM");
  const auto mask = read_back<uint32_t>(pref.get(), CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK);
  EXPECT_EQ(mask & CUBLASLT_REDUCTION_SCHEME_INPLACE, 0u) << "partial sums added in place, in the output type";
  EXPECT_EQ(mask & CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE, 0u) << "partial sums kept in the output type";
  EXPECT_EQ(mask & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, uint32_t{CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE})
      << "split-K in fp32 is allowed: it is the fast path for large K";
  // The rest of what the plan asks for, as set.
  EXPECT_EQ(read_back<uint64_t>(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES), uint64_t{32} << 20);
  EXPECT_EQ(read_back<uint32_t>(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES), 16u);
  EXPECT_EQ(read_back<uint32_t>(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES), 256u);
  EXPECT_EQ(read_back<uint32_t>(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES), 64u);
  EXPECT_EQ(read_back<uint32_t>(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES), 64u);
}
