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

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

CudnnSdpa::CudnnSdpa(int64_t bucket)
    : CudnnPath(sdpa_unusable(), /*dynamic_shapes=*/true),
      bucket_(bucket > 0 && cudnn::sdpa_compiled() && cudnn::sdpa_seq_len_usable() ? bucket : 0) {
  if (bucket_ > 0) set_note(cat("lengths padded to multiples of ", bucket_));
}

int64_t CudnnSdpa::spare_rows_wanted() const { return disabled() || bucket_ == 0 ? 0 : bucket_ - 1; }

CudnnSdpa::PlanShape CudnnSdpa::plan_shape(const AttentionShape& s, int64_t spare_rows) const {
  if (bucket_ > 0) {
    const PlanShape padded{round_up(s.Lq, bucket_), round_up(s.Lk, bucket_), true};
    if (padded.Lq - s.Lq <= spare_rows && padded.Lk - s.Lk <= spare_rows) return padded;
  }
  return {s.Lq, s.Lk, false};
}

bool CudnnSdpa::eligible(const void* q, const void* k, const void* v, const void* o, DType dtype,
                         const AttentionShape& s, const PlanShape& p, std::string* why) const {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (disabled()) return no("cuDNN SDPA is " + status());
  if (dtype != DType::BF16) return no(cat("dtype ", dtype_name(dtype), " (cuDNN SDPA takes bf16)"));
  if (s.causal) return no("causal (needs cuDNN >= 9.21)");
  if (s.H != s.Hkv) return no("grouped-query attention");
  if (s.Dh % 8 != 0 || s.Dh > 128) return no(cat("head dim ", s.Dh, " (multiple of 8, at most 128)"));
  if (cache().refused({p.Lq, p.Lk, s.H, s.Dh, p.padded})) return no("cuDNN has no plan for this shape");
  for (const void* ptr : {q, k, v, o})
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return no("a tensor is not 16-byte aligned");
  return true;
}

CudnnSdpa::Result CudnnSdpa::run(const CudaContext& ctx, const void* q, const void* k, const void* v, void* o,
                                 const AttentionShape& s, const PlanShape& p, const int32_t* lengths,
                                 std::string* error) {
  float scale = s.scale;  // read at execute time (a by-value tensor)
  std::vector<int64_t> uids = {cudnn::kSdpaQ, cudnn::kSdpaK, cudnn::kSdpaV, cudnn::kSdpaO, cudnn::kSdpaScale};
  std::vector<void*> pointers = {const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), o, &scale};
  if (p.padded) {  // the real lengths, for the padding mask
    if (!lengths) fail(cat("attention (cuDNN SDPA): a call padded to ", p.Lq, " and ", p.Lk, " has no sequence lengths"));
    int32_t* words = const_cast<int32_t*>(lengths);
    uids.insert(uids.end(), {cudnn::kSdpaSeqLenQ, cudnn::kSdpaSeqLenKv});
    pointers.insert(pointers.end(), {words, words + kSeqLenStride});
  }
  return run_plan(
      ctx, {p.Lq, p.Lk, s.H, s.Dh, p.padded}, [&] { return cudnn::sdpa_graph(p.Lq, p.Lk, s.H, s.Dh, p.padded); },
      uids, pointers, "attention (cuDNN SDPA)",
      [&] {
        return cat("cuDNN SDPA (Lq ", s.Lq, " Lk ", s.Lk, " H ", s.H, " Dh ", s.Dh,
                   p.padded ? cat(", padded to ", p.Lq, " and ", p.Lk) : std::string(), ")");
      },
      error);
}

}  // namespace ditbatch::cuda
