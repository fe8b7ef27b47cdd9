// cuDNN's fused scaled-dot-product attention through the backend (graph) C API: one
// CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR op (cuDNN >= 9.13.1 at run time; a build
// against headers older than 9.13.0 has the path off from the start), bf16 Q/K/V/O in the
// [L, H, Dh] layout, fp32 softmax inside the fused kernel. Non-causal only (causal needs the
// score-modifier subgraph of cuDNN >= 9.21), H == Hkv, Dh a multiple of 8 up to 128.
//
// Plans are cached by shape. Where the caller leaves spare rows past its tensors and cuDNN has
// sequence lengths (>= 9.15.0), the lengths are padded up to a multiple of the bucket and the
// plan is built for the padded ones, masking the rest: a job of 10,000 prompts of many text
// lengths then builds a few plans per resolution, not one per length. Anything that fails
// disables the path for the life of the backend with the reason, and the caller falls back
// to attention_gemm.
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
  // bucket: the multiple padded lengths are rounded up to (0: always the exact lengths).
  explicit CudnnSdpa(int64_t bucket = kDefaultBucket);

  static constexpr size_t kMinVersion = 91301;  // cudnnGetVersion() of 9.13.1
  static constexpr int64_t kDefaultBucket = 128;  // a Hopper flash tile: at most 3 % more rows at 1024^2

  // The rows past each tensor a call can put to use (bucket - 1), or 0 where it never pads.
  int64_t spare_rows_wanted() const;
  // The lengths a call's plan is built for: padded where spare_rows leave room for both.
  struct PlanShape {
    int64_t Lq = 0, Lk = 0;
    bool padded = false;
  };
  PlanShape plan_shape(const AttentionShape& s, int64_t spare_rows) const;

  // Can this call, with plan shape p (plan_shape()), go to cuDNN? If not, *why says why (for
  // logs and tests).
  bool eligible(const void* q, const void* k, const void* v, const void* o, DType dtype, const AttentionShape& s,
                const PlanShape& p, std::string* why) const;
  // Queues the attention on ctx.stream with the plan for p. Failed: *error says why and
  // nothing was written. A padded p reads s.Lq and s.Lk from the device words
  // set_sequence_lengths wrote at lengths (in stream order), and may write o's rows past s.Lq
  // up to the padded length.
  Result run(const CudaContext& ctx, const void* q, const void* k, const void* v, void* o, const AttentionShape& s,
             const PlanShape& p, const int32_t* lengths, std::string* error);

 private:
  int64_t bucket_ = 0;  // 0 where this cuDNN or this build has no sequence lengths
};

}  // namespace ditbatch::cuda
