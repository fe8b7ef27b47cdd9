// cuDNN's fused scaled-dot-product attention through the backend (graph) C API: one
// CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR op (cuDNN >= 9.13.1 at run time; a build
// against headers older than 9.13.0 has the path off from the start), bf16 Q/K/V/O in the
// [L, H, Dh] layout, fp32 softmax inside the fused kernel. Non-causal only (causal needs the
// score-modifier subgraph of cuDNN >= 9.21), H == Hkv, Dh a multiple of 8 up to 128.
// Plans are built once per (Lq, Lk, H, Dh) and cached; anything that fails disables the path
// for the life of the backend with the reason, and the caller falls back to attention_gemm.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "cuda_context.h"
#include "cudnn_path.h"
#include "launch.h"

namespace ditbatch::cuda {

class CudnnSdpa : public CudnnPath {
 public:
  CudnnSdpa();

  static constexpr size_t kMinVersion = 91301;  // cudnnGetVersion() of 9.13.1

  // Can this call go to cuDNN? If not, *why says why (for logs and tests).
  bool eligible(const void* q, const void* k, const void* v, const void* o, DType dtype, const AttentionShape& s,
                std::string* why) const;
  // Queues the attention on ctx.stream. Failed: *error says why and nothing was written.
  Result run(const CudaContext& ctx, const void* q, const void* k, const void* v, void* o, const AttentionShape& s,
             std::string* error);
};

}  // namespace ditbatch::cuda
