#include "app/backends.h"

#include "core/error.h"
#include "cpu/cpu_backend.h"
#ifdef DITBATCH_HAVE_CUDA
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

std::unique_ptr<Backend> make_backend(const std::string& kind, [[maybe_unused]] int device, const Log& log) {
  if (kind != "auto" && kind != "cpu" && kind != "cuda")
    fail_input("--backend '{}' (expected auto, cpu or cuda)", kind);
  if (kind == "cpu") return std::make_unique<CpuBackend>();
  const int gpus = visible_gpu_count();
  if (kind == "cuda") {
#ifndef DITBATCH_HAVE_CUDA
    fail_input("--backend cuda: this ditbatch was built without CUDA (-DDITBATCH_CUDA=OFF)");
#else
    if (gpus == 0) fail_input("--backend cuda: no usable GPU ({})", cuda_describe_devices());
    fail_input("--backend cuda: the CUDA backend is not implemented yet in this build (device {})", device);
#endif
  }
  if (gpus > 0) log.warn("a GPU is visible but the CUDA backend is not implemented yet: using the CPU backend");
  else log.info("no GPU: using the CPU backend");
  return std::make_unique<CpuBackend>();
}

}  // namespace ditbatch
