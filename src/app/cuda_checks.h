// The CUDA backend's own selftest checks (CUDA builds only): each attention path and each
// convolution path at the models' shapes, said with whether `auto` picks it, and the GPU's
// description. The CUDA tests (test_cuda_ops) run the same path checks.
#pragma once

#ifdef DITBATCH_HAVE_CUDA

#include <string>
#include <vector>

#include "cuda_backend.h"
#include "selftest/report.h"

namespace ditbatch {

struct AttentionPathCase {
  const char* name;
  int64_t Lq, Lk, H, Hkv, Dh;
  bool causal;
  int64_t spare = 0;  // rows past q, k, v and out, as the transformer leaves them (cuDNN may pad)
  int64_t chunk_rows = 0;  // the GEMM path's query rows per chunk at most (0: by memory, one chunk here)
};
const std::vector<AttentionPathCase>& attention_path_cases();

struct PathCheck {
  std::string ran;            // the path that ran: "cudnn", "cudnn padded", "gemm", "flash", "im2col"
  std::string status_before;  // the cuDNN path's status before the call ("available (...)" / "disabled: ...")
  std::string status_after;
  double error = 0;           // attention: nmse vs float64; convolution: vs the CPU backend
  double naive_bf16 = -1;     // attention: naive bf16 attention's nmse vs float64 (the rule's yardstick)
  double error_vs_cpu = 0;
  int64_t nonfinite = 0;
  int64_t gemm_chunks = 0;    // attention: query-row chunks the GEMM path took
  std::string failure;        // empty: passed
};

// The case on a bf16 backend of `options` with `path` asked for, held to FlashAttention's rule
// against float64 and to 1e-4 against the CPU backend.
PathCheck check_attention_path(CudaBackendOptions options, const AttentionPathCase& c, CudaAttentionPath path);

struct ConvPathCase {
  const char* name;
  int64_t H, W, Cin, Cout;
};
const std::vector<ConvPathCase>& conv_path_cases();
PathCheck check_conv_path(CudaBackendOptions options, const ConvPathCase& c, CudaConvPath path);

// Rows of every path of every case, each saying what ran and what `auto` runs there.
void check_cuda_paths(selftest::Report& report, int device, bool quick);
// The GPU and the CUDA libraries found: name, UUID, SMs, memory, driver, runtime, cuBLASLt and
// cuDNN versions and where they were loaded from.
void describe_cuda(selftest::Report& report, int device);

}  // namespace ditbatch

#endif  // DITBATCH_HAVE_CUDA
