#include "cuda_device.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <fmt/format.h>

namespace ditbatch {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later queries start clean
    return 0;
  }
  return n;
}

std::string cuda_describe_devices() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("no CUDA device: {} ({})", cudaGetErrorString(err), static_cast<int>(err));
  }
  std::string out;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out += fmt::format("{}: {}, sm_{}{}, {:.1f} GiB, {} SMs\n", i, prop.name, prop.major, prop.minor,
                       static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0), prop.multiProcessorCount);
  }
  return out.empty() ? std::string("no CUDA device") : out;
}

std::string cuda_library_versions() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  return fmt::format("cudart {}, driver {}, cuBLASLt {}, cuDNN {}", runtime, driver, cublasLtGetVersion(),
                     cudnnGetVersion());
}

}  // namespace ditbatch
