#include "attention_cudnn.h"

#include "cuda_check.h"
#include "cudnn_graph.h"

namespace ditbatch::cuda {

namespace {

// Why this build's SDPA path cannot run ("" when it can): compiled out (older headers: auto
// then takes the GEMM path), else the run-time checks of the cuDNN loaded.
std::string sdpa_unusable() {
  if (!cudnn::sdpa_compiled()) return cudnn::not_compiled_reason("cuDNN SDPA", DITBATCH_CUDNN_SDPA_HEADERS);
  return cudnn::unusable_reason(CudnnSdpa::kMinVersion, "the unified SDPA operation needs 9.13.1");
}

}  // namespace

CudnnSdpa::CudnnSdpa() : CudnnPath(sdpa_unusable(), /*dynamic_shapes=*/true) {}

bool CudnnSdpa::eligible(const void* q, const void* k, const void* v, const void* o, DType dtype,
                         const AttentionShape& s, std::string* why) const {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (disabled()) return no("cuDNN SDPA is " + status());
  if (dtype != DType::BF16) return no(cat("dtype ", dtype_name(dtype), " (cuDNN SDPA takes bf16)"));
  if (s.causal) return no("causal (needs cuDNN >= 9.21)");
  if (s.H != s.Hkv) return no("grouped-query attention");
  if (s.Dh % 8 != 0 || s.Dh > 128) return no(cat("head dim ", s.Dh, " (multiple of 8, at most 128)"));
  if (cache().refused({s.Lq, s.Lk, s.H, s.Dh})) return no("cuDNN has no plan for this shape");
  for (const void* p : {q, k, v, o})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return no("a tensor is not 16-byte aligned");
  return true;
}

CudnnSdpa::Result CudnnSdpa::run(const CudaContext& ctx, const void* q, const void* k, const void* v, void* o,
                                 const AttentionShape& s, std::string* error) {
  float scale = s.scale;  // read at execute time (a by-value tensor)
  return run_plan(
      ctx, {s.Lq, s.Lk, s.H, s.Dh}, [&] { return cudnn::sdpa_graph(s.Lq, s.Lk, s.H, s.Dh); },
      {cudnn::kSdpaQ, cudnn::kSdpaK, cudnn::kSdpaV, cudnn::kSdpaO, cudnn::kSdpaScale},
      {const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), o, &scale}, "attention (cuDNN SDPA)",
      [&] { return cat("cuDNN SDPA (Lq ", s.Lq, " Lk ", s.Lk, " H ", s.H, " Dh ", s.Dh, ")"); }, error);
}

}  // namespace ditbatch::cuda
