// What the CPU emulation (tools/device/emulate.py) puts in place of the parts that need the
// real libraries: every GEMM through the reference kernel (gemm_reference.cu, emulated like
// every other kernel), cuDNN (SDPA and convolution) absent, two emulated devices.
#include <set>
#include <string>

#include "attention_cudnn.h"
#include "conv_cudnn.h"
#include "cuda_check.h"
#include "cuda_device.h"
#include "gemm.h"

namespace ditbatch {

int cuda_device_count() {
  int n = 0;
  cudaGetDeviceCount(&n);
  return n;
}
std::string cuda_describe_devices() {
  std::string out;
  for (int d = 0; d < cuda_device_count(); ++d)
    out += std::to_string(d) + ": CPU emulation of a CUDA device (tools/device/emulate.py)\n";
  return out;
}
std::string cuda_library_versions() { return "emulated: no cudart, cuBLASLt or cuDNN"; }
std::string cuda_library_paths() { return ""; }
std::string cuda_kernel_image_check() { return ""; }
std::string cuda_device_uuid(int device) {
  std::string uuid(32, '0');
  uuid[0] = 'e';
  uuid.back() = static_cast<char>('0' + device % 10);
  return uuid;
}
CudaBuild cuda_build() {
  CudaBuild b;
  b.architectures = "CPU emulation";
  return b;
}
CudaRuntime cuda_runtime() { return {}; }
std::string cuda_driver_problem() { return ""; }  // the emulated device needs no driver
std::string cuda_version_report() {
  return "CUDA backend: CPU emulation (tools/device/emulate.py): no toolkit, driver or cuDNN\n";
}

namespace cuda {

struct GemmEngine::Cache {
  std::set<std::string> shapes;
};

GemmEngine::GemmEngine(int, cudaStream_t) : cache_(std::make_unique<Cache>()) {}
GemmEngine::~GemmEngine() = default;
int64_t GemmEngine::cached_shapes() const { return static_cast<int64_t>(cache_->shapes.size()); }

void GemmEngine::run(const CudaContext& ctx, const GemmCall& c) {
  if (c.m <= 0 || c.n <= 0 || c.k <= 0 || c.batch < 1 || c.a.dtype != c.b.dtype ||
      (c.epilogue != GemmEpilogue::None) != (c.bias != nullptr) || reinterpret_cast<uintptr_t>(c.bias) % 16 != 0)
    fail(cat(c.op, ": bad GEMM call m ", c.m, " n ", c.n, " k ", c.k, " batch ", c.batch));
  const int64_t a_rows = c.a.transposed ? c.k : c.m, b_rows = c.b.transposed ? c.n : c.k;
  if (c.a.ld < a_rows || c.b.ld < b_rows || c.ldd < c.m) fail(cat(c.op, ": a leading dimension is too small"));
  cache_->shapes.insert(cat(c.m, ',', c.n, ',', c.k, ',', c.batch));
  gemm_reference(ctx, c);
}

// Both cuDNN paths: permanently off (no plan cache: cudnn_graph.cpp is not built here).
namespace cudnn {
class PlanCache {};
}  // namespace cudnn
CudnnPath::CudnnPath(const std::string&, bool) {}
CudnnPath::~CudnnPath() = default;
void CudnnPath::disable(const std::string&) {}
void CudnnPath::release() {}
bool CudnnPath::disabled() const { return true; }
std::string CudnnPath::status() const { return "disabled: CPU emulation has no cuDNN"; }

CudnnSdpa::CudnnSdpa(int64_t) : CudnnPath("", true) {}
int64_t CudnnSdpa::spare_rows_wanted() const { return 0; }
CudnnSdpa::PlanShape CudnnSdpa::plan_shape(const AttentionShape& s, int64_t) const { return {s.Lq, s.Lk, false}; }
bool CudnnSdpa::eligible(const void*, const void*, const void*, const void*, DType, const AttentionShape&,
                         const PlanShape&, std::string* why) const {
  if (why) *why = "CPU emulation: no cuDNN";
  return false;
}
CudnnSdpa::Result CudnnSdpa::run(const CudaContext&, const void*, const void*, const void*, void*,
                                 const AttentionShape&, const PlanShape&, const int32_t*, std::string* error) {
  if (error) *error = "CPU emulation: no cuDNN";
  return Result::Failed;
}

CudnnConv::CudnnConv() : CudnnPath("", false) {}
bool CudnnConv::eligible(const void*, const void*, const void*, const void*, DType, const ConvShape&,
                         std::string* why) const {
  if (why) *why = "CPU emulation: no cuDNN";
  return false;
}
CudnnConv::Result CudnnConv::run(const CudaContext&, const void*, const void*, const void*, void*, DType,
                                 const ConvShape&, std::string* error) {
  if (error) *error = "CPU emulation: no cuDNN";
  return Result::Failed;
}

}  // namespace cuda
}  // namespace ditbatch
