#include "gemm.h"

#include <cublasLt.h>

#include <array>
#include <map>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "gemm_preference.h"

namespace ditbatch::cuda {
namespace {

constexpr int kAlgorithms = 8;  // heuristic results kept per shape

void check_lt(cublasStatus_t status, const std::string& what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail(cat(what, ": cuBLASLt status ", static_cast<int>(status), " (", cublasGetStatusName(status), ": ",
             cublasGetStatusString(status), ")"));
}

cudaDataType_t cuda_type(DType t, const char* op, const char* what) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    default: fail(cat(op, ": ", what, " must be f32 or bf16 for a GEMM, got ", dtype_name(t)));
  }
}

// The largest power of two (<= 256) dividing the address and every batch offset.
uint32_t alignment_of(const void* ptr, int64_t batch_stride_bytes, int batch) {
  uint64_t bits = reinterpret_cast<uintptr_t>(ptr) | 256u;
  if (batch > 1) bits |= static_cast<uint64_t>(batch_stride_bytes) | 256u;
  return static_cast<uint32_t>(bits & (~bits + 1));
}

std::string describe(const GemmCall& c) {
  auto operand = [](const GemmOperand& o) {
    return cat(dtype_name(o.dtype), o.transposed ? "^T" : "", " ld ", o.ld, " stride ", o.batch_stride);
  };
  return cat(c.op, ": GEMM m ", c.m, " n ", c.n, " k ", c.k, " batch ", c.batch, ", A ", operand(c.a), ", B ",
             operand(c.b), ", D ", dtype_name(c.d_dtype), " ld ", c.ldd, " stride ", c.d_batch_stride, ", epilogue ",
             static_cast<int>(c.epilogue));
}

}  // namespace

GemmPreference make_gemm_preference(uint64_t workspace_bytes, uint32_t align_a, uint32_t align_b, uint32_t align_d,
                                    const std::string& what) {
  cublasLtMatmulPreference_t raw = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&raw), what + " (preference)");
  GemmPreference pref(raw);
  auto set = [&](cublasLtMatmulPreferenceAttributes_t attribute, const auto& value, const char* name) {
    check_lt(cublasLtMatmulPreferenceSetAttribute(raw, attribute, &value, sizeof value), cat(what, " (preference: ", name, ")"));
  };
  set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes, "workspace");
  set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, kGemmReductionSchemes, "reduction schemes");
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a, "alignment of A");
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b, "alignment of B");
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d, "alignment of C");
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d, "alignment of D");
  return pref;
}

bool gemm_reduction_allowed(const cublasLtMatmulAlgo_t& algo) {
  uint32_t scheme = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof scheme,
                                           &written) != CUBLAS_STATUS_SUCCESS)
    return false;
  return (scheme & ~kGemmReductionSchemes) == 0;
}

struct GemmEngine::Plan {
  bool reference = false;  // no cuBLASLt algorithm: use gemm_reference
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  // The heuristic's results in its order; `next` is the one in use. One that cublasLtMatmul
  // refuses at run time is skipped for the next (deterministic: the same order every run).
  std::vector<cublasLtMatmulAlgo_t> algos;
  size_t next = 0;
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// Keyed by every number that shapes a plan (no string formatting per call: ~1000 GEMMs a step).
using PlanKey = std::array<int64_t, 20>;
struct GemmEngine::Cache {
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
};

GemmEngine::GemmEngine(int device, cudaStream_t) : cache_(std::make_unique<Cache>()) {
  check(cudaSetDevice(device), "gemm: cudaSetDevice");
  check_lt(cublasLtCreate(&handle_), "gemm: cublasLtCreate");
  check(cudaMalloc(&workspace_, workspace_bytes_), "gemm: the 32 MiB cuBLASLt workspace");
}

GemmEngine::~GemmEngine() {
  cache_.reset();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

int64_t GemmEngine::cached_shapes() const { return static_cast<int64_t>(cache_->plans.size()); }

GemmEngine::Plan& GemmEngine::plan_for(const CudaContext& ctx, const GemmCall& c) {
  const size_t a_size = dtype_size(c.a.dtype), d_size = dtype_size(c.d_dtype);
  const uint32_t align_a = alignment_of(c.a.ptr, c.a.batch_stride * static_cast<int64_t>(a_size), c.batch);
  const uint32_t align_b = alignment_of(c.b.ptr, c.b.batch_stride * static_cast<int64_t>(a_size), c.batch);
  const uint32_t align_d = alignment_of(c.d, c.d_batch_stride * static_cast<int64_t>(d_size), c.batch);
  const uint32_t align_bias = c.bias ? alignment_of(c.bias, 0, 1) : 256u;
  const PlanKey key = {c.m, c.n, c.k, c.batch, int64_t(c.a.dtype), int64_t(c.a.transposed), c.a.ld, c.a.batch_stride,
                       int64_t(c.b.transposed), c.b.ld, c.b.batch_stride, int64_t(c.d_dtype), c.ldd, c.d_batch_stride,
                       int64_t(c.epilogue), align_a, align_b, align_d, align_bias, 0};
  auto it = cache_->plans.find(key);
  if (it != cache_->plans.end()) return *it->second;

  auto plan = std::make_unique<Plan>();
  const std::string what = describe(c);
  const cudaDataType_t ab_type = cuda_type(c.a.dtype, c.op, "the GEMM operands");
  const cudaDataType_t d_type = cuda_type(c.d_dtype, c.op, "the GEMM output");
  check_lt(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), what + " (matmul descriptor)");
  const cublasOperation_t ta = c.a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = c.b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), what);
  check_lt(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), what);
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (c.epilogue == GemmEpilogue::Bias) epilogue = CUBLASLT_EPILOGUE_BIAS;
  if (c.epilogue == GemmEpilogue::GeluBias) epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
  check_lt(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
           what);
  if (c.epilogue != GemmEpilogue::None) {
    const int32_t bias_type = d_type;
    check_lt(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                            sizeof bias_type),
             what);
    // The heuristic reads the bias pointer's alignment.
    check_lt(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof c.bias),
             what);
  }
  auto layout = [&](cublasLtMatrixLayout_t* out, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                    int64_t stride) {
    check_lt(cublasLtMatrixLayoutCreate(out, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
             what + " (layout)");
    if (c.batch > 1) {
      const int32_t count = c.batch;
      check_lt(cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count), what);
      check_lt(cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                sizeof stride),
               what);
    }
  };
  layout(&plan->a, ab_type, c.a.transposed ? c.k : c.m, c.a.transposed ? c.m : c.k, c.a.ld, c.a.batch_stride);
  layout(&plan->b, ab_type, c.b.transposed ? c.n : c.k, c.b.transposed ? c.k : c.n, c.b.ld, c.b.batch_stride);
  layout(&plan->d, d_type, c.m, c.n, c.ldd, c.d_batch_stride);

  const GemmPreference pref = make_gemm_preference(workspace_bytes_, align_a, align_b, align_d, what);
  cublasLtMatmulHeuristicResult_t results[kAlgorithms] = {};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->d,
                                                               plan->d, pref.get(), kAlgorithms, results, &found);
  if (status == CUBLAS_STATUS_SUCCESS)
    for (int i = 0; i < found; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS && gemm_reduction_allowed(results[i].algo))
        plan->algos.push_back(results[i].algo);
  if (plan->algos.empty()) {
    plan->reference = true;
    if (ctx.warn)
      ctx.warn(cat(what, ": cuBLASLt offers no algorithm (status ", static_cast<int>(status), ", ", found,
                   " results); using the reference GEMM kernel for this shape"));
  }
  return *cache_->plans.emplace(std::move(key), std::move(plan)).first->second;
}

void GemmEngine::run(const CudaContext& ctx, const GemmCall& c) {
  if (c.m <= 0 || c.n <= 0 || c.k <= 0 || c.batch < 1) fail(describe(c) + ": every size must be positive");
  if (c.a.dtype != c.b.dtype) fail(describe(c) + ": A and B must have the same dtype");
  if ((c.epilogue != GemmEpilogue::None) != (c.bias != nullptr))
    fail(describe(c) + ": a bias epilogue needs a bias pointer and only then");
  if (c.bias && reinterpret_cast<uintptr_t>(c.bias) % 16 != 0) fail(describe(c) + ": the bias must be 16-byte aligned");
  const int64_t a_rows = c.a.transposed ? c.k : c.m, b_rows = c.b.transposed ? c.n : c.k;
  if (c.a.ld < a_rows || c.b.ld < b_rows || c.ldd < c.m) fail(describe(c) + ": a leading dimension is too small");
  if (force_reference_) {
    gemm_reference(ctx, c);
    return;
  }
  Plan& plan = plan_for(ctx, c);
  if (plan.reference) {
    gemm_reference(ctx, c);
    return;
  }
  if (c.bias) {
    const cublasStatus_t set =
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof c.bias);
    if (set != CUBLAS_STATUS_SUCCESS) check_lt(set, describe(c) + " (bias pointer)");
  }
  const float beta = 0.0f;
  ctx.library_call_starts(c.op);
  while (true) {
    const cublasStatus_t status =
        cublasLtMatmul(handle_, plan.desc, &c.alpha, c.a.ptr, plan.a, c.b.ptr, plan.b, &beta, c.d, plan.d, c.d,
                       plan.d, &plan.algos[plan.next], workspace_, workspace_bytes_, ctx.stream);
    if (status == CUBLAS_STATUS_SUCCESS) break;
    if (status != CUBLAS_STATUS_NOT_SUPPORTED && status != CUBLAS_STATUS_INVALID_VALUE) check_lt(status, describe(c));
    take_pending_error();  // the refusal's own, said by its status
    // The heuristic's algorithm refused the call after all: the next one, or our kernel.
    if (ctx.warn)
      ctx.warn(cat(describe(c), ": cublasLtMatmul refused heuristic algorithm ", plan.next, " of ", plan.algos.size(),
                   " (", cublasGetStatusName(status), ")",
                   plan.next + 1 < plan.algos.size() ? "; trying the next" : "; using the reference GEMM kernel"));
    if (++plan.next >= plan.algos.size()) {
      plan.reference = true;
      gemm_reference(ctx, c);
      return;
    }
  }
  ctx.library_call_done(c.op);
}

}  // namespace ditbatch::cuda
