#include "app/backends.h"

#include "core/error.h"
#include "cpu/cpu_backend.h"
#ifdef DITBATCH_HAVE_CUDA
#include "cuda_backend.h"
#include "cuda_device.h"
#endif

namespace ditbatch {

int visible_gpu_count() {
#ifdef DITBATCH_HAVE_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

std::string gpu_identity([[maybe_unused]] int device) {
#ifdef DITBATCH_HAVE_CUDA
  return cuda_device_uuid(device);
#else
  return "";
#endif
}

std::string gpu_support_report() {
#ifdef DITBATCH_HAVE_CUDA
  return cuda_version_report();
#else
  return "CUDA backend: not built (configured with -DDITBATCH_CUDA=OFF, or no nvcc was found): CPU backend only\n";
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& kind, [[maybe_unused]] int device, const Log& log) {
  if (kind != "auto" && kind != "cpu" && kind != "cuda")
    fail_input("--backend '{}' (expected auto, cpu or cuda)", kind);
  if (kind == "cpu") return std::make_unique<CpuBackend>();
#ifndef DITBATCH_HAVE_CUDA
  if (kind == "cuda") fail_input("--backend cuda: this ditbatch was built without CUDA (-DDITBATCH_CUDA=OFF)");
#else
  // A driver too old for this build is refused for auto too: the node has a GPU that this
  // binary cannot use, and falling back to the CPU would run the job there for days.
  if (const std::string driver = cuda_driver_problem(); !driver.empty() && (kind == "cuda" || cuda_runtime().driver > 0))
    fail_input("--backend {}: {}{}", kind, driver, kind == "auto" ? " (--backend cpu runs without the GPU)" : "");
  const int gpus = visible_gpu_count();
  if (kind == "cuda" && gpus == 0) fail_input("--backend cuda: no usable GPU ({})", cuda_describe_devices());
  if (gpus > 0) {
    log.info("using the CUDA backend on GPU {} ({})", std::max(device, 0), cuda_library_versions());
    return make_cuda_backend(std::max(device, 0), log);
  }
#endif
  log.info("no GPU: using the CPU backend");
  return std::make_unique<CpuBackend>();
}

}  // namespace ditbatch
