// The cuDNN backend (graph) C API, once for every cuDNN path: owned descriptors, tensors,
// the heuristics -> engine config -> execution plan sequence, and execution. The graphs
// themselves (which ops, which layouts) are built by the functions at the end, so that the
// backend and the tests build exactly the same ones.
//
// Heuristics can also run without a GPU, from a device-properties JSON (cuDNN >= 9.8's
// "deviceless" mode): the tests do that for an H200 on the build machine, so a graph cuDNN
// would refuse fails in CI, not in the few minutes a GPU is lent.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <functional>
#include <utility>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"

// What the cuDNN headers this file is compiled against declare (CUDNN_VERSION of cuDNN 9 is
// major * 10000 + minor * 100 + patch). A build against older headers leaves the path out and
// says so at run time (and tools/cmake/cudnn_features.cmake, with the same thresholds, at
// configure time):
//   the unified SDPA operation (CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, its Q/K/V/O/SCALE
//   attributes): first in the 9.13.0 headers; the run-time gate stays 9.13.1 (CudnnSdpa).
//   its sequence lengths (CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC / _KVDESC, the padding
//   mask): first in 9.15.0, the same at run time.
//   device properties for deviceless heuristics (CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR,
//   CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP,
//   CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP): first in 9.8.0.
//   the kernel cache of a graph's topology with dynamic shapes (CUDNN_BACKEND_KERNEL_CACHE_
//   DESCRIPTOR, CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH, CUDNN_ATTR_EXECUTION_PLAN_KERNEL_CACHE,
//   CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED): first in 9.5.0, the same at run time.
//   the convolution + bias graph and everything else here: in 9.0.0.
#define DITBATCH_CUDNN_SDPA_HEADERS 91300
#define DITBATCH_CUDNN_SDPA_SEQ_LEN_HEADERS 91500
#define DITBATCH_CUDNN_DEVICEPROP_HEADERS 90800
#define DITBATCH_CUDNN_KERNEL_CACHE_HEADERS 90500
#define DITBATCH_CUDNN_HAS_SDPA (CUDNN_VERSION >= DITBATCH_CUDNN_SDPA_HEADERS)
#define DITBATCH_CUDNN_HAS_SDPA_SEQ_LEN (CUDNN_VERSION >= DITBATCH_CUDNN_SDPA_SEQ_LEN_HEADERS)
#define DITBATCH_CUDNN_HAS_DEVICEPROP (CUDNN_VERSION >= DITBATCH_CUDNN_DEVICEPROP_HEADERS)
#define DITBATCH_CUDNN_HAS_KERNEL_CACHE (CUDNN_VERSION >= DITBATCH_CUDNN_KERNEL_CACHE_HEADERS)

namespace ditbatch::cuda::cudnn {

// Whether this build has the path; when not, why (the headers' version and the one needed).
bool sdpa_compiled();
// Whether SDPA graphs can carry sequence lengths (padded Q/K/V): in this build; in this build
// and with the cuDNN loaded.
bool sdpa_seq_len_compiled();
bool sdpa_seq_len_usable();
bool deviceless_compiled();
// Whether one compiled kernel can serve every shape of a graph (kernel cache + dynamic shapes),
// in this build and with the cuDNN loaded.
bool kernel_cache_usable();
std::string not_compiled_reason(const char* what, int needed_version);

// A failure while building or running a plan: the callers turn it into a fallback.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// cuDNN has no plan for one shape (the path stays on for the others).
struct NoPlan : Failure {
  using Failure::Failure;
};

// Why the cuDNN loaded at run time cannot serve a path that needs min_version (older, or
// built for another CUDA major than this process's cudart); empty when it can.
std::string unusable_reason(size_t min_version, const char* path);

// Throws Failure naming `what`, the status and cuDNN's last error message.
void ok(cudnnStatus_t status, const char* what);

// An owned backend descriptor.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type);
  ~Desc();
  Desc(Desc&& other) noexcept : d_(other.d_) { other.d_ = nullptr; }
  Desc& operator=(Desc&& other) noexcept {
    std::swap(d_, other.d_);
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values,
           const char* what);
  void set_desc(cudnnBackendAttributeName_t name, const Desc& value, const char* what);
  void finalize(const char* what);

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

struct TensorSpec {
  int64_t uid = 0;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::vector<int64_t> dims, strides;
  bool by_value = false;    // a host scalar read at execute time
  bool is_virtual = false;  // an intermediate inside a fused graph (no memory)
};
Desc tensor(const TensorSpec& spec);

// An operation graph ready for heuristics: its ops and everything they point to.
struct Graph {
  std::vector<Desc> parts;  // tensors and op-level descriptors, kept alive with the graph
  std::vector<Desc> ops;
  std::string name;         // for messages: "SDPA Lq 4116 Lk 4116 H 24 Dh 128"
};

// Non-causal SDPA, bf16 Q/K/V/O as separate [L, H, Dh] buffers (BSHD strides), the scale a
// by-value f32. uids: 1 Q, 2 K, 3 V, 4 O, 5 scale. Throws Failure when not compiled in.
// padded: Lq and Lk are the lengths the buffers are padded to, and two device int32 tensors
// (uids 6, 7) hold the real ones: keys past the real Lk are masked off, and O's rows past the
// real Lq are left undefined. One plan then serves every length up to Lq, Lk.
Graph sdpa_graph(int64_t Lq, int64_t Lk, int64_t H, int64_t Dh, bool padded = false);
enum SdpaUid : int64_t { kSdpaQ = 1, kSdpaK = 2, kSdpaV = 3, kSdpaO = 4, kSdpaScale = 5, kSdpaSeqLenQ = 6,
                         kSdpaSeqLenKv = 7 };

// 3x3 convolution, stride 1, padding 1, of one NHWC image, fp32 accumulation, then + bias
// (a fused pointwise add): x [H, W, Cin], w [Cout, 3, 3, Cin] (KRSC), bias [Cout], y [H, W, Cout].
// uids: 1 x, 2 w, 3 bias, 4 y.
Graph conv3x3_bias_graph(int64_t H, int64_t W, int64_t Cin, int64_t Cout, DType dtype);
// Its convolution: stride 1, padding 1, cross-correlation as torch, fp32 accumulation, of x by
// w into y, finalized: {the convolution descriptor, the forward operation}. Tensors that do
// not fit together throw Failure here.
std::pair<Desc, Desc> conv3x3_forward(const Desc& x, const Desc& w, const Desc& y);
enum ConvUid : int64_t { kConvX = 1, kConvW = 2, kConvBias = 3, kConvY = 4 };

// A device-properties descriptor from cuDNN's JSON form (deviceless heuristics). Throws
// Failure when not compiled in.
Desc device_properties(const std::string& json);

struct Plan {
  Graph graph;
  Desc op_graph, heuristics;
  std::vector<Desc> configs;
  Desc plan;
  int64_t engine_configs = 0;  // how many the heuristics listed
  int64_t usable_configs = 0;  // how many of those passed cuDNN's support checks
  // The usable ones whose numerical notes say neither non-deterministic nor reduced-precision
  // reduction, in heuristic order: the only ones a plan is made from (the same bytes on every run).
  std::vector<size_t> exact_configs;
  std::string engine;  // the chosen config: "engine 12 (knobs 3=1 7=0)"
  bool dynamic_shape = false;  // built with a kernel cache: other shapes reuse its kernel
  bool made_kernel_cache = false;  // the cache was made from this plan's graph (kept while it is)
  int64_t workspace = 0;
};

// An engine config's numerical notes (CUDNN_NUMERICAL_NOTE_*).
std::vector<cudnnBackendNumericalNote_t> numerical_notes(const Desc& config);
// "engine 12 (knobs 3=1 7=0)": what identifies a config across shapes.
std::string engine_name(const Desc& config);

// Heuristics (mode A) on the graph, then the first exact engine config (above), in the
// heuristics' order, whose execution plan finalizes (deterministic). With a handle: a plan for
// that handle's GPU. With device_props instead (no GPU): the heuristics, and with finalize_plan
// a plan for that device (precompiled engines finalize without a GPU; runtime-compiled ones
// need the driver). With kernel_cache (kernel_cache_usable()): the graph is built with dynamic
// shapes and the plan takes its kernel from the cache, compiling it only the first time.
std::unique_ptr<Plan> make_plan(Graph graph, cudnnHandle_t handle, const Desc* device_props = nullptr,
                                bool finalize_plan = true, Desc* kernel_cache = nullptr);

// What each cuDNN path of the backend keeps: a handle made on first use, its plans by shape
// (at most kMaxPlans, the least recently used dropped first), one kernel cache per kernel (see
// Key) that the plans of every extent share (a job of 10,000 prompts of many text lengths
// compiles each engine's kernel once, not once per length), the engine configs already
// checked (per kernel), and, once something failed, why the path is off (it then stays off
// for the backend's life). A plan is destroyed only after the work queued with it is done.
class PlanCache {
 public:
  // A plan's shape: first the two extents one kernel serves (SDPA: Lq, Lk; convolution: H, W),
  // then what picks the kernel (SDPA: heads, head dim and the graph variant, padded or not;
  // convolution: Cin, Cout, 0).
  using Key = std::array<int64_t, 5>;
  using KernelKey = std::array<int64_t, 3>;
  static KernelKey kernel_key(const Key& key) { return {key[2], key[3], key[4]}; }
  static constexpr size_t kMaxPlans = 64;
  // dynamic_shapes: build plans with a shared kernel cache (falls back to one plan per shape,
  // said in status(), where this cuDNN cannot).
  PlanCache(std::string disabled, bool dynamic_shapes);
  ~PlanCache() { release(); }
  PlanCache(const PlanCache&) = delete;
  PlanCache& operator=(const PlanCache&) = delete;

  // The handle, bound to stream.
  cudnnHandle_t handle(cudaStream_t stream);
  // Plans for the device props describe instead of a handle's (no GPU: the tests).
  void use_device_properties(const Desc* props) { device_props_ = props; }
  // What waits for the work queued with this cache's plans before any plan, kernel cache or
  // the handle is destroyed: by default the handle's stream, synchronised (tests count calls).
  void set_queue_wait(std::function<void()> wait) { queue_wait_ = std::move(wait); }
  // The plan for key: built with make_graph() and this cache's handle the first time.
  // *new_engine says whether its engine config is one this cache has not run before (the
  // caller checks its first output). A shape cuDNN has no plan for throws NoPlan and is
  // remembered as refused; the path stays on for other shapes, except when cuDNN refused the
  // first two shapes and never made a plan (the environment, e.g. no NVRTC: Failure, the
  // caller switches the path off).
  const Plan& plan(const Key& key, const std::function<Graph()>& make_graph, bool* new_engine);
  bool refused(const Key& key) const { return refused_.count(key) > 0; }
  // Destroys the plans, the kernel caches and the handle (before the stream they are bound to goes).
  void release();
  // Switches the path off and destroys its plans (after the work queued with them).
  void disable(const std::string& why);
  bool disabled() const { return !disabled_.empty(); }
  // "available (cuDNN 91900, 3 plans of 2 engine configs, one kernel cache)" or "disabled: <why>".
  std::string status() const;
  size_t plans_held() const { return plans_.size(); }
  bool has_kernel_cache() const {
    for (const auto& [variant, cache] : kernel_caches_)
      if (cache && cache->get()) return true;
    return false;
  }

 private:
  struct Entry {
    std::unique_ptr<Plan> plan;
    uint64_t last_used = 0;
  };
  std::unique_ptr<Plan> build(const Key& key, const std::function<Graph()>& make_graph);
  // Waits for the work queued with the plans (queue_wait_, or the handle's stream).
  void wait_for_queued_work();

  cudnnHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the handle's
  std::function<void()> queue_wait_;
  const Desc* device_props_ = nullptr;
  std::string disabled_;
  std::map<Key, Entry> plans_;
  std::set<Key> refused_;
  std::set<std::string> engines_seen_;  // engine config and kernel key
  std::map<KernelKey, std::unique_ptr<Desc>> kernel_caches_;
  std::string no_kernel_cache_;  // why plans are built without one ("" while it works)
  uint64_t uses_ = 0;
  int64_t plans_made_ = 0;
};

// Queues the plan on the handle's stream. uids and pointers pair up; workspace may be null
// when plan.workspace is 0.
void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace);

}  // namespace ditbatch::cuda::cudnn
