// The matmul preference every cuBLASLt plan is chosen under (gemm.cpp), apart so that the tests
// can read back what it allows without a GPU.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <memory>
#include <string>

namespace ditbatch::cuda {

// The split-K reductions a plan may use: none, or partial sums kept and added in the compute
// type (fp32). INPLACE and OUTPUT_TYPE add the partial sums in the output type (bf16): a
// reduced-precision reduction, which cuBLASLt's default (every scheme) allows and which the
// heuristic picks for small-M, large-K shapes (the text stream, the text encoder).
constexpr uint32_t kGemmReductionSchemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;

// Whether an algorithm's configuration reduces within kGemmReductionSchemes.
bool gemm_reduction_allowed(const cublasLtMatmulAlgo_t& algo);

struct GemmPreferenceDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using GemmPreference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, GemmPreferenceDeleter>;

// The workspace the algorithm may use, the alignments of A, B and C = D in bytes, and the
// reduction schemes above. `what` names the call in an error.
GemmPreference make_gemm_preference(uint64_t workspace_bytes, uint32_t align_a, uint32_t align_b, uint32_t align_d,
                                    const std::string& what);

}  // namespace ditbatch::cuda
