#include "cudnn_graph.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "cuda_check.h"
#include "cuda_context.h"
#include "cudnn_path.h"

namespace ditbatch::cuda::cudnn {

bool sdpa_compiled() { return DITBATCH_CUDNN_HAS_SDPA; }
bool sdpa_seq_len_compiled() { return DITBATCH_CUDNN_HAS_SDPA_SEQ_LEN; }
bool sdpa_seq_len_usable() {
  return DITBATCH_CUDNN_HAS_SDPA_SEQ_LEN && cudnnGetVersion() >= DITBATCH_CUDNN_SDPA_SEQ_LEN_HEADERS;
}
bool deviceless_compiled() { return DITBATCH_CUDNN_HAS_DEVICEPROP; }
bool kernel_cache_usable() {
  return DITBATCH_CUDNN_HAS_KERNEL_CACHE && cudnnGetVersion() >= DITBATCH_CUDNN_KERNEL_CACHE_HEADERS;
}

std::string not_compiled_reason(const char* what, int needed_version) {
  return cat(what, " is not compiled in: this build's cuDNN headers are ", CUDNN_MAJOR, ".", CUDNN_MINOR, ".",
             CUDNN_PATCHLEVEL, ", it needs ", needed_version / 10000, ".", needed_version / 100 % 100, ".",
             needed_version % 100, " or newer (rebuild against them)");
}

std::string unusable_reason(size_t min_version, const char* path) {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  const size_t version = cudnnGetVersion(), built_for = cudnnGetCudartVersion();
  if (version < min_version) return cat("cuDNN ", version, " at run time is older than ", min_version, " (", path, ")");
  if (built_for / 1000 != static_cast<size_t>(runtime) / 1000)  // e.g. a CUDA 12 wheel's cuDNN found first
    return cat("the cuDNN loaded (", version, ") was built for CUDA ", built_for, ", this process runs cudart ",
               runtime, " (its NVRTC kernels would not load)");
  return "";
}

void ok(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof last);
  throw Failure(cat(what, ": ", cudnnGetErrorString(status), " (", static_cast<int>(status), ")",
                    last[0] ? ": " : "", last));
}

Desc::Desc(cudnnBackendDescriptorType_t type) { ok(cudnnBackendCreateDescriptor(type, &d_), "create descriptor"); }

Desc::~Desc() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}

void Desc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values,
               const char* what) {
  ok(cudnnBackendSetAttribute(d_, name, type, count, values), what);
}

void Desc::set_desc(cudnnBackendAttributeName_t name, const Desc& value, const char* what) {
  cudnnBackendDescriptor_t v = value.get();
  set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
}

void Desc::finalize(const char* what) { ok(cudnnBackendFinalize(d_), what); }

Desc tensor(const TensorSpec& s) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t alignment = 16;
  const auto rank = static_cast<int64_t>(s.dims.size());
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &s.uid, "tensor uid");
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &s.type, "tensor data type");
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, s.dims.data(), "tensor dimensions");
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, s.strides.data(), "tensor strides");
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "tensor alignment");
  const bool yes = true;
  if (s.by_value) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes, "tensor by value");
  if (s.is_virtual) t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes, "tensor virtual");
  t.finalize("tensor");
  return t;
}

// ---- the graphs ---------------------------------------------------------------------------------

Graph sdpa_graph(int64_t Lq, int64_t Lk, int64_t H, int64_t Dh, bool padded) {
#if !DITBATCH_CUDNN_HAS_SDPA
  (void)Lq, (void)Lk, (void)H, (void)Dh, (void)padded;
  throw Failure(not_compiled_reason("cuDNN SDPA", DITBATCH_CUDNN_SDPA_HEADERS));
#else
  if (padded && !sdpa_seq_len_usable())
    throw Failure(DITBATCH_CUDNN_HAS_SDPA_SEQ_LEN
                      ? cat("cuDNN ", cudnnGetVersion(), " at run time has no SDPA sequence lengths (9.15.0)")
                      : not_compiled_reason("SDPA with sequence lengths", DITBATCH_CUDNN_SDPA_SEQ_LEN_HEADERS));
  Graph g;
  g.name = cat("SDPA Lq ", Lq, " Lk ", Lk, " H ", H, " Dh ", Dh, padded ? " padded" : "");
  // [L, H, Dh] row-major seen as [B=1, H, L, Dh] (BSHD strides).
  const std::vector<int64_t> q_dims = {1, H, Lq, Dh}, q_strides = {Lq * H * Dh, Dh, H * Dh, 1};
  const std::vector<int64_t> k_dims = {1, H, Lk, Dh}, k_strides = {Lk * H * Dh, Dh, H * Dh, 1};
  const std::vector<int64_t> one = {1, 1, 1, 1};
  g.parts.push_back(tensor({kSdpaQ, CUDNN_DATA_BFLOAT16, q_dims, q_strides}));
  g.parts.push_back(tensor({kSdpaK, CUDNN_DATA_BFLOAT16, k_dims, k_strides}));
  g.parts.push_back(tensor({kSdpaV, CUDNN_DATA_BFLOAT16, k_dims, k_strides}));
  g.parts.push_back(tensor({kSdpaO, CUDNN_DATA_BFLOAT16, q_dims, q_strides}));
  g.parts.push_back(tensor({kSdpaScale, CUDNN_DATA_FLOAT, one, one, /*by_value=*/true}));
  Desc op(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, g.parts[0], "SDPA Q");
  op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, g.parts[1], "SDPA K");
  op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, g.parts[2], "SDPA V");
  op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, g.parts[3], "SDPA O");
  op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, g.parts[4], "SDPA scale");
#if DITBATCH_CUDNN_HAS_SDPA_SEQ_LEN
  if (padded) {  // [B=1, 1, 1, 1] each: both are needed for the padding mask
    g.parts.push_back(tensor({kSdpaSeqLenQ, CUDNN_DATA_INT32, one, one}));
    g.parts.push_back(tensor({kSdpaSeqLenKv, CUDNN_DATA_INT32, one, one}));
    op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC, g.parts[5], "SDPA sequence length of Q");
    op.set_desc(CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC, g.parts[6], "SDPA sequence length of K/V");
  }
#endif
  op.finalize("SDPA operation");
  g.ops.push_back(std::move(op));
  return g;
#endif
}

std::pair<Desc, Desc> conv3x3_forward(const Desc& x, const Desc& w, const Desc& y) {
  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t accumulate = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;  // what torch's Conv2d computes
  const int64_t spatial = 2, ones[2] = {1, 1};
  conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &accumulate, "conv compute type");
  conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "conv mode");
  conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial, "conv spatial dims");
  conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, ones, "conv dilations");
  conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, ones, "conv strides");
  conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, ones, "conv pre-paddings");
  conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, ones, "conv post-paddings");
  conv.finalize("convolution descriptor");

  Desc fprop(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  const float alpha = 1.0f, beta = 0.0f;
  fprop.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x, "conv X");
  fprop.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w, "conv W");
  fprop.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y, "conv Y");
  fprop.set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv, "conv descriptor");
  fprop.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, "conv alpha");
  fprop.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta, "conv beta");
  fprop.finalize("convolution forward operation");
  return {std::move(conv), std::move(fprop)};
}

Graph conv3x3_bias_graph(int64_t H, int64_t W, int64_t Cin, int64_t Cout, DType dtype) {
  Graph g;
  g.name = cat("conv 3x3 ", H, "x", W, " ", Cin, "->", Cout, " ", dtype_name(dtype));
  const cudnnDataType_t io = dtype == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  // NCHW dims with NHWC strides (cuDNN's convention for channels-last); the filter is KRSC.
  const std::vector<int64_t> x_dims = {1, Cin, H, W}, x_strides = {H * W * Cin, 1, W * Cin, Cin};
  const std::vector<int64_t> w_dims = {Cout, Cin, 3, 3}, w_strides = {9 * Cin, 1, 3 * Cin, Cin};
  const std::vector<int64_t> y_dims = {1, Cout, H, W}, y_strides = {H * W * Cout, 1, W * Cout, Cout};
  const std::vector<int64_t> b_dims = {1, Cout, 1, 1}, b_strides = {Cout, 1, Cout, Cout};
  constexpr int64_t kConvOut = 100;  // the virtual fp32 result before the bias
  g.parts.push_back(tensor({kConvX, io, x_dims, x_strides}));
  g.parts.push_back(tensor({kConvW, io, w_dims, w_strides}));
  g.parts.push_back(tensor({kConvBias, io, b_dims, b_strides}));
  g.parts.push_back(tensor({kConvY, io, y_dims, y_strides}));
  g.parts.push_back(tensor({kConvOut, CUDNN_DATA_FLOAT, y_dims, y_strides, false, /*is_virtual=*/true}));
  const Desc &x = g.parts[0], &w = g.parts[1], &bias = g.parts[2], &y = g.parts[3], &conv_out = g.parts[4];

  const cudnnDataType_t accumulate = CUDNN_DATA_FLOAT;
  auto [conv, fprop] = conv3x3_forward(x, w, conv_out);

  Desc add(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  const cudnnPointwiseMode_t add_mode = CUDNN_POINTWISE_ADD;
  add.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &add_mode, "bias add mode");
  add.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &accumulate, "bias add precision");
  add.finalize("bias add descriptor");
  Desc bias_op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  bias_op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, add, "bias add");
  bias_op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, conv_out, "bias add X");
  bias_op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, bias, "bias add B");
  bias_op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "bias add Y");
  bias_op.finalize("bias add operation");

  g.parts.push_back(std::move(conv));
  g.parts.push_back(std::move(add));
  g.ops.push_back(std::move(fprop));
  g.ops.push_back(std::move(bias_op));
  return g;
}

Desc device_properties(const std::string& json) {
#if !DITBATCH_CUDNN_HAS_DEVICEPROP
  (void)json;
  throw Failure(not_compiled_reason("cuDNN's deviceless heuristics", DITBATCH_CUDNN_DEVICEPROP_HEADERS));
#else
  Desc d(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  d.set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, static_cast<int64_t>(json.size()), json.data(),
        "device properties JSON");
  d.finalize("device properties");
  return d;
#endif
}

namespace {

// Points a heuristics or plan descriptor at a device described by properties (no GPU needed).
void set_device_properties(Desc& target, const Desc& props, bool plan) {
#if !DITBATCH_CUDNN_HAS_DEVICEPROP
  (void)target, (void)props, (void)plan;
  throw Failure(not_compiled_reason("cuDNN's deviceless heuristics", DITBATCH_CUDNN_DEVICEPROP_HEADERS));
#else
  if (plan) target.set_desc(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, props, "plan device");
  else target.set_desc(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, props, "heuristics device");
#endif
}

}  // namespace

// ---- heuristics, plan, execution ----------------------------------------------------------------

namespace {

// The engine descriptor an engine config names (cuDNN copies it into one we own).
Desc engine_of(const Desc& config) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0;
  ok(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw),
     "engine of an engine config");
  return engine;
}

bool is_exact(const std::vector<cudnnBackendNumericalNote_t>& notes) {
  for (const auto note : notes)
    if (note == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC || note == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)
      return false;
  return true;
}

void set_kernel_cache(Desc& plan, Desc& cache) {
#if DITBATCH_CUDNN_HAS_KERNEL_CACHE
  plan.set_desc(CUDNN_ATTR_EXECUTION_PLAN_KERNEL_CACHE, cache, "plan kernel cache");
#else
  (void)plan, (void)cache;
#endif
}

}  // namespace

std::vector<cudnnBackendNumericalNote_t> numerical_notes(const Desc& config) {
  const Desc engine = engine_of(config);
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  int64_t n = 0;
  ok(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                              static_cast<int64_t>(notes.size()), &n, notes.data()),
     "engine numerical notes");
  return {notes.begin(), notes.begin() + std::clamp<int64_t>(n, 0, static_cast<int64_t>(notes.size()))};
}

std::string engine_name(const Desc& config) {
  const Desc engine = engine_of(config);
  int64_t index = -1, n = 0;
  ok(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index),
     "engine global index");
  std::vector<Desc> choices;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    choices.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    raw.push_back(choices.back().get());
  }
  ok(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                              static_cast<int64_t>(raw.size()), &n, raw.data()),
     "engine config knob choices");
  std::string knobs;
  for (int64_t i = 0; i < std::min<int64_t>(n, static_cast<int64_t>(raw.size())); ++i) {
    cudnnBackendKnobType_t type{};
    int64_t value = 0, got = 0;
    ok(cudnnBackendGetAttribute(raw[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1,
                                &got, &type),
       "knob type");
    ok(cudnnBackendGetAttribute(raw[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1,
                                &got, &value),
       "knob value");
    knobs += cat(knobs.empty() ? "" : " ", static_cast<int>(type), "=", value);
  }
  return cat("engine ", index, knobs.empty() ? "" : " (knobs ", knobs, knobs.empty() ? "" : ")");
}

std::unique_ptr<Plan> make_plan(Graph graph, cudnnHandle_t handle, const Desc* device_props, bool finalize_plan,
                                Desc* kernel_cache) {
  auto p = std::make_unique<Plan>();
  p->graph = std::move(graph);
  const std::string& name = p->graph.name;

  p->op_graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  if (handle) p->op_graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "graph handle");
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const Desc& op : p->graph.ops) ops.push_back(op.get());
  p->op_graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()),
                  ops.data(), "graph ops");
#if DITBATCH_CUDNN_HAS_KERNEL_CACHE
  if (kernel_cache) {
    const bool yes = true;
    p->op_graph.set(CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED, CUDNN_TYPE_BOOLEAN, 1, &yes,
                    "graph dynamic shapes");
    p->dynamic_shape = true;
  }
#else
  if (kernel_cache) throw Failure(not_compiled_reason("cuDNN's kernel cache", DITBATCH_CUDNN_KERNEL_CACHE_HEADERS));
#endif
  p->op_graph.finalize("operation graph");
#if DITBATCH_CUDNN_HAS_KERNEL_CACHE
  if (kernel_cache && !kernel_cache->get()) {  // the first graph of this topology makes the cache
    Desc made(CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR);
    made.set_desc(CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH, p->op_graph, "kernel cache graph");
    made.finalize("kernel cache");
    *kernel_cache = std::move(made);
    p->made_kernel_cache = true;
  }
#endif

  p->heuristics = Desc(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  p->heuristics.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, p->op_graph, "heuristics graph");
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  p->heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
  if (device_props) set_device_properties(p->heuristics, *device_props, /*plan=*/false);
  p->heuristics.finalize("heuristics");
  ok(cudnnBackendGetAttribute(p->heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                              &p->engine_configs, nullptr),
     "heuristics result count");
  if (p->engine_configs <= 0) throw Failure(cat(name, ": the heuristics offer no engine for this graph"));
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < p->engine_configs; ++i) {
    p->configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(p->configs.back().get());
  }
  ok(cudnnBackendGetAttribute(p->heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                              p->engine_configs, &p->usable_configs, raw.data()),
     "heuristics results");
  p->usable_configs = std::min(p->usable_configs, p->engine_configs);
  if (p->usable_configs <= 0)  // the status is SUCCESS and the reason only reaches cuDNN's own log
    throw Failure(cat(name, ": the heuristics listed ", p->engine_configs,
                      " engine configs but none passed its support checks (usually NVRTC or libcuda not loadable: "
                      "NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING); rerun with CUDNN_LOGLEVEL_DBG=2 "
                      "CUDNN_LOGDEST_DBG=stderr to see cuDNN's reason"));
  for (int64_t i = 0; i < p->usable_configs; ++i)
    if (is_exact(numerical_notes(p->configs[static_cast<size_t>(i)]))) p->exact_configs.push_back(static_cast<size_t>(i));
  if (p->exact_configs.empty())
    throw Failure(cat(name, ": all ", p->usable_configs,
                      " usable engine configs are non-deterministic or reduce in reduced precision"));
  if (!finalize_plan) return p;
  if (!handle && !device_props) throw Failure(cat(name, ": a plan needs a handle or device properties"));

  std::string failures;
  for (const size_t i : p->exact_configs) {
    try {  // the first exact engine config that finalizes, in heuristic order: deterministic
      Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      if (handle) plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "plan handle");
      else set_device_properties(plan, *device_props, /*plan=*/true);
      plan.set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, p->configs[i], "plan config");
      if (kernel_cache) set_kernel_cache(plan, *kernel_cache);
      plan.finalize("execution plan");
      int64_t n = 0;
      ok(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                  &p->workspace),
         "plan workspace size");
      p->engine = engine_name(p->configs[i]);
      p->plan = std::move(plan);
      return p;
    } catch (const Failure& e) {
      failures += cat(" [config ", i, ": ", e.what(), "]");
    }
  }
  throw Failure(cat(name, ": none of the ", p->exact_configs.size(), " exact engine configs finalized:", failures));
}

cudnnHandle_t PlanCache::handle(cudaStream_t stream) {
  if (!handle_) ok(cudnnCreate(&handle_), "cudnnCreate");
  ok(cudnnSetStream(handle_, stream), "cudnnSetStream");
  stream_ = stream;
  return handle_;
}

PlanCache::PlanCache(std::string disabled, bool dynamic_shapes) : disabled_(std::move(disabled)) {
  if (!dynamic_shapes)
    no_kernel_cache_ = "the path's shapes are few";
  else if (!kernel_cache_usable())
    no_kernel_cache_ = DITBATCH_CUDNN_HAS_KERNEL_CACHE
                           ? cat("cuDNN ", cudnnGetVersion(), " predates the kernel cache (9.5.0)")
                           : not_compiled_reason("cuDNN's kernel cache", DITBATCH_CUDNN_KERNEL_CACHE_HEADERS);
}

std::unique_ptr<Plan> PlanCache::build(const Key& key, const std::function<Graph()>& make_graph) {
  if (no_kernel_cache_.empty()) {
    std::unique_ptr<Desc>& cache = kernel_caches_[kernel_key(key)];  // a cache serves one kernel's extents
    if (!cache) cache = std::make_unique<Desc>();
    try {
      return make_plan(make_graph(), handle_, device_props_, true, cache.get());
    } catch (const Failure& e) {
      // This cuDNN cannot build the graph with dynamic shapes (SDPA's arrived after the
      // cache): one plan per shape from now on.
      no_kernel_cache_ = e.what();
      wait_for_queued_work();
      kernel_caches_.clear();
    }
  }
  return make_plan(make_graph(), handle_, device_props_);
}

const Plan& PlanCache::plan(const Key& key, const std::function<Graph()>& make_graph, bool* new_engine) {
  *new_engine = false;
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    std::unique_ptr<Plan> made;
    try {
      made = build(key, make_graph);
    } catch (const Failure& e) {
      refused_.insert(key);
      // One odd shape costs one fallback. Two refusals before any plan was made are more
      // likely the environment (NVRTC, driver), where every new shape would cost a second: off.
      if (plans_made_ == 0 && refused_.size() >= 2)
        throw Failure(cat(e.what(), " (the second shape cuDNN refused, and it has made no plan)"));
      throw NoPlan(e.what());
    }
    ++plans_made_;
    if (plans_.size() >= kMaxPlans) {
      auto oldest = plans_.begin();
      for (auto i = plans_.begin(); i != plans_.end(); ++i)  // the cache's own graph stays
        if (!i->second.plan->made_kernel_cache &&
            (oldest->second.plan->made_kernel_cache || i->second.last_used < oldest->second.last_used))
          oldest = i;
      if (!oldest->second.plan->made_kernel_cache) {
        wait_for_queued_work();  // the oldest plan's last execution may still be queued
        plans_.erase(oldest);
      }
    }
    // An engine config is checked once per kernel: other heads, head dims or channels, or the
    // padded graph's masking, are new work for an engine that already ran.
    const KernelKey kernel = kernel_key(key);
    *new_engine =
        engines_seen_.insert(cat(made->engine, " for ", kernel[0], " ", kernel[1], " variant ", kernel[2])).second;
    it = plans_.emplace(key, Entry{std::move(made), 0}).first;
  }
  it->second.last_used = ++uses_;
  return *it->second.plan;
}

void PlanCache::wait_for_queued_work() {
  if (queue_wait_) {
    queue_wait_();
    return;
  }
  // A failed wait is a fault of queued work: the next checked call on the stream reports it.
  if (handle_ && stream_) cudaStreamSynchronize(stream_);
}

void PlanCache::release() {
  if (!plans_.empty() || !kernel_caches_.empty() || handle_) wait_for_queued_work();
  kernel_caches_.clear();  // before the graphs they were made from
  plans_.clear();
  if (handle_) cudnnDestroy(handle_);
  handle_ = nullptr;
  stream_ = nullptr;
}

void PlanCache::disable(const std::string& why) {
  disabled_ = why;
  if (!plans_.empty() || !kernel_caches_.empty()) wait_for_queued_work();  // e.g. sample 0's SDPA, still queued
  kernel_caches_.clear();
  plans_.clear();
}

std::string PlanCache::status() const {
  if (disabled()) return "disabled: " + disabled_;
  return cat("available (cuDNN ", cudnnGetVersion(), ", ", plans_made_, " plans of ", engines_seen_.size(),
             " engine configs, ", no_kernel_cache_.empty() ? "one kernel cache for every shape" : "a plan per shape: " + no_kernel_cache_,
             ")");
}

void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace) {
  if (uids.size() != pointers.size()) throw Failure(cat(plan.graph.name, ": ", uids.size(), " uids for ",
                                                        pointers.size(), " pointers"));
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const auto n = static_cast<int64_t>(uids.size());
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data(), "variant pack uids");
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pointers.data(), "variant pack pointers");
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, "variant pack workspace");
  pack.finalize("variant pack");
  ok(cudnnBackendExecute(handle, plan.plan.get(), pack.get()), "cudnnBackendExecute");
}

}  // namespace ditbatch::cuda::cudnn

namespace ditbatch::cuda {

CudnnPath::CudnnPath(const std::string& unusable, bool dynamic_shapes)
    : cache_(std::make_unique<cudnn::PlanCache>(unusable, dynamic_shapes)) {}
CudnnPath::~CudnnPath() = default;
void CudnnPath::disable(const std::string& why) { cache_->disable(why); }
void CudnnPath::release() { cache_->release(); }
bool CudnnPath::disabled() const { return cache_->disabled(); }
std::string CudnnPath::status() const {
  return disabled() || note_.empty() ? cache_->status() : cache_->status() + "; " + note_;
}
cudnn::PlanCache& CudnnPath::cache() const { return *cache_; }

CudnnPath::Result CudnnPath::run_plan(const CudaContext& ctx, const std::array<int64_t, 5>& key,
                                      const std::function<cudnn::Graph()>& make_graph,
                                      const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
                                      const char* what, const std::function<std::string()>& describe,
                                      std::string* error) {
  try {
    ctx.library_call_starts(what);
    const cudnnHandle_t handle = cache_->handle(ctx.stream);
    bool new_engine = false;
    const cudnn::Plan& plan = cache_->plan(key, make_graph, &new_engine);
    DeviceBlock workspace;
    if (plan.workspace > 0) workspace = ctx.scratch(static_cast<size_t>(plan.workspace), what);
    cudnn::execute(handle, plan, uids, pointers, workspace.get());
    ctx.library_call_done(what);
    return new_engine ? Result::RanNewEngine : Result::Ran;
  } catch (const cudnn::NoPlan& e) {
    if (error) *error = e.what();
    return Result::NoPlan;
  } catch (const std::exception& e) {
    if (error) *error = cat(describe(), ", cuDNN ", cudnnGetVersion(), ": ", e.what());
    return Result::Failed;
  }
}

}  // namespace ditbatch::cuda
