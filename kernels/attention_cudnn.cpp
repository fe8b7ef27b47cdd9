#include "attention_cudnn.h"

#include <cudnn.h>

#include <map>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "cuda_check.h"

namespace ditbatch::cuda {
namespace {

// A failure while building or running a plan: caught in run() and turned into a fallback.
struct CudnnFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void ok(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof last);
  throw CudnnFailure(cat(what, ": ", cudnnGetErrorString(status), " (", static_cast<int>(status), ")",
                         last[0] ? ": " : "", last));
}

// An owned backend descriptor.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type) { ok(cudnnBackendCreateDescriptor(type, &d_), "create descriptor"); }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& other) noexcept : d_(other.d_) { other.d_ = nullptr; }
  Desc& operator=(Desc&& other) noexcept {
    std::swap(d_, other.d_);
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t* ptr() { return &d_; }

  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values,
           const char* what) {
    ok(cudnnBackendSetAttribute(d_, name, type, count, values), what);
  }
  void set_desc(cudnnBackendAttributeName_t name, const Desc& value, const char* what) {
    cudnnBackendDescriptor_t v = value.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
  }
  void finalize(const char* what) { ok(cudnnBackendFinalize(d_), what); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

enum Uid : int64_t { kQ = 1, kK = 2, kV = 3, kO = 4, kScale = 5 };

Desc tensor(int64_t uid, cudnnDataType_t type, const int64_t (&dims)[4], const int64_t (&strides)[4], bool by_value) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t alignment = 16;
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor data type");
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dimensions");
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "tensor alignment");
  if (by_value) {
    const bool yes = true;
    t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes, "tensor by value");
  }
  t.finalize("tensor");
  return t;
}

struct Plan {
  // Everything the plan was made from stays alive with it.
  Desc q, k, v, o, scale, op, graph, heuristics;
  std::vector<Desc> configs;
  Desc plan;
  int64_t workspace = 0;
};

}  // namespace

struct CudnnSdpa::Impl {
  size_t version = cudnnGetVersion();
  cudnnHandle_t handle = nullptr;
  std::string disabled;  // non-empty: why the path is off
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::unique_ptr<Plan>> plans;

  std::unique_ptr<Plan> build(const AttentionShape& s) {
    auto p = std::make_unique<Plan>();
    const int64_t H = s.H, Dh = s.Dh;
    const int64_t q_dims[4] = {1, H, s.Lq, Dh}, q_strides[4] = {s.Lq * H * Dh, Dh, H * Dh, 1};
    const int64_t k_dims[4] = {1, H, s.Lk, Dh}, k_strides[4] = {s.Lk * H * Dh, Dh, H * Dh, 1};
    const int64_t one[4] = {1, 1, 1, 1};
    p->q = tensor(kQ, CUDNN_DATA_BFLOAT16, q_dims, q_strides, false);
    p->k = tensor(kK, CUDNN_DATA_BFLOAT16, k_dims, k_strides, false);
    p->v = tensor(kV, CUDNN_DATA_BFLOAT16, k_dims, k_strides, false);
    p->o = tensor(kO, CUDNN_DATA_BFLOAT16, q_dims, q_strides, false);
    p->scale = tensor(kScale, CUDNN_DATA_FLOAT, one, one, true);

    p->op = Desc(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
    p->op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, p->q, "SDPA Q");
    p->op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, p->k, "SDPA K");
    p->op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, p->v, "SDPA V");
    p->op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, p->o, "SDPA O");
    p->op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, p->scale, "SDPA scale");
    p->op.finalize("SDPA operation");

    p->graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    p->graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "graph handle");
    cudnnBackendDescriptor_t op = p->op.get();
    p->graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op, "graph ops");
    p->graph.finalize("operation graph");

    p->heuristics = Desc(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    p->heuristics.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, p->graph, "heuristics graph");
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    p->heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    p->heuristics.finalize("heuristics");
    int64_t count = 0;
    ok(cudnnBackendGetAttribute(p->heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                &count, nullptr),
       "heuristics result count");
    if (count <= 0) throw CudnnFailure("the heuristics offer no engine for this SDPA graph");
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      p->configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(p->configs.back().get());
    }
    int64_t returned = 0;
    ok(cudnnBackendGetAttribute(p->heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                count, &returned, raw.data()),
       "heuristics results");
    std::string failures;
    for (int64_t i = 0; i < std::min(returned, count); ++i) {
      try {  // the first engine config that finalizes, in heuristic order: deterministic
        Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "plan handle");
        plan.set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, p->configs[static_cast<size_t>(i)], "plan config");
        plan.finalize("execution plan");
        int64_t n = 0;
        ok(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                    &p->workspace),
           "plan workspace size");
        p->plan = std::move(plan);
        return p;
      } catch (const CudnnFailure& e) {
        failures += cat(" [config ", i, ": ", e.what(), "]");
      }
    }
    throw CudnnFailure(cat("none of the ", returned, " engine configs finalized:", failures));
  }
};

CudnnSdpa::CudnnSdpa() : impl_(std::make_unique<Impl>()) {
  if (impl_->version < kMinVersion)
    impl_->disabled = cat("cuDNN ", impl_->version, " at run time is older than 9.13.1 (the unified SDPA operation)");
}

CudnnSdpa::~CudnnSdpa() {
  if (impl_) {
    impl_->plans.clear();
    if (impl_->handle) cudnnDestroy(impl_->handle);
  }
}

void CudnnSdpa::disable(const std::string& why) {
  impl_->disabled = why;
  impl_->plans.clear();
}

bool CudnnSdpa::disabled() const { return !impl_->disabled.empty(); }

std::string CudnnSdpa::status() const {
  if (disabled()) return "disabled: " + impl_->disabled;
  return cat("available (cuDNN ", impl_->version, ", ", impl_->plans.size(), " plans built)");
}

bool CudnnSdpa::eligible(const void* q, const void* k, const void* v, const void* o, DType dtype,
                         const AttentionShape& s, std::string* why) const {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (disabled()) return no("cuDNN SDPA is disabled: " + impl_->disabled);
  if (dtype != DType::BF16) return no(cat("dtype ", dtype_name(dtype), " (cuDNN SDPA takes bf16)"));
  if (s.causal) return no("causal (needs cuDNN >= 9.21)");
  if (s.H != s.Hkv) return no("grouped-query attention");
  if (s.Dh % 8 != 0 || s.Dh > 128) return no(cat("head dim ", s.Dh, " (multiple of 8, at most 128)"));
  for (const void* p : {q, k, v, o})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return no("a tensor is not 16-byte aligned");
  return true;
}

CudnnSdpa::Result CudnnSdpa::run(const CudaContext& ctx, const void* q, const void* k, const void* v, void* o,
                                 const AttentionShape& s, std::string* error) {
  Impl& m = *impl_;
  try {
    if (!m.handle) {
      ok(cudnnCreate(&m.handle), "cudnnCreate");
    }
    ok(cudnnSetStream(m.handle, ctx.stream), "cudnnSetStream");
    bool fresh = false;
    auto key = std::make_tuple(s.Lq, s.Lk, s.H, s.Dh);
    auto it = m.plans.find(key);
    if (it == m.plans.end()) {
      it = m.plans.emplace(key, m.build(s)).first;
      fresh = true;
    }
    const Plan& plan = *it->second;
    DeviceBlock workspace;
    if (plan.workspace > 0) workspace = ctx.scratch(static_cast<size_t>(plan.workspace), "attention (cuDNN workspace)");
    float scale = s.scale;  // read at execute time (a by-value tensor)
    const int64_t uids[5] = {kQ, kK, kV, kO, kScale};
    void* pointers[5] = {const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), o, &scale};
    void* workspace_ptr = workspace.get();
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 5, uids, "variant pack uids");
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 5, pointers, "variant pack pointers");
    pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace_ptr, "variant pack workspace");
    pack.finalize("variant pack");
    ok(cudnnBackendExecute(m.handle, plan.plan.get(), pack.get()), "cudnnBackendExecute");
    check_launch("attention (cuDNN SDPA)", ctx.stream, ctx.sync_each_op);
    return fresh ? Result::RanNewPlan : Result::Ran;
  } catch (const std::exception& e) {
    if (error)
      *error = cat("cuDNN SDPA (Lq ", s.Lq, " Lk ", s.Lk, " H ", s.H, " Dh ", s.Dh, ", cuDNN ", m.version,
                   "): ", e.what());
    return Result::Failed;
  }
}

}  // namespace ditbatch::cuda
