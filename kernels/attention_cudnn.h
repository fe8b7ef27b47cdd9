// cuDNN's fused scaled-dot-product attention through the backend (graph) C API: one
// CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR op (cuDNN >= 9.13.1), bf16 Q/K/V/O in the
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
#include "launch.h"

namespace ditbatch::cuda {

class CudnnSdpa {
 public:
  CudnnSdpa();
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  static constexpr size_t kMinVersion = 91301;  // cudnnGetVersion() of 9.13.1

  // Can this call go to cuDNN? If not, *why says why (for logs and tests).
  bool eligible(const void* q, const void* k, const void* v, const void* o, DType dtype, const AttentionShape& s,
                std::string* why) const;
  // NoPlan: cuDNN has no plan for this shape (the path stays on for others); Failed: the
  // path should be switched off. Neither wrote the output.
  enum class Result { Ran, RanNewPlan, NoPlan, Failed };
  // Queues the attention on ctx.stream. Failed: *error says why and nothing was written.
  Result run(const CudaContext& ctx, const void* q, const void* k, const void* v, void* o, const AttentionShape& s,
             std::string* error);
  void disable(const std::string& why);
  // Destroys the plans and the handle (before the stream they are bound to goes); a later
  // run() makes them again.
  void release();
  bool disabled() const;
  // "available (cuDNN 91900)" or "disabled: <why>".
  std::string status() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ditbatch::cuda
