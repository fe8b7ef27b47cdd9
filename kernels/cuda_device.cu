#include "cuda_device.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <dlfcn.h>
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

std::string cuda_device_uuid(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  std::string hex;
  for (unsigned char byte : prop.uuid.bytes) hex += fmt::format("{:02x}", byte);
  return hex;
}

std::string cuda_library_versions() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  return fmt::format("cudart {}, driver {}, cuBLASLt {} (for CUDA {}), cuDNN {} (for CUDA {})", runtime, driver,
                     cublasLtGetVersion(), cublasLtGetCudartVersion(), cudnnGetVersion(), cudnnGetCudartVersion());
}

namespace {

std::string library_of(const void* symbol, const char* name) {
  Dl_info info{};
  if (symbol && dladdr(symbol, &info) && info.dli_fname) return fmt::format("{} -> {}\n", name, info.dli_fname);
  return fmt::format("{} -> (not found)\n", name);
}

__global__ void probe_kernel(int* out) {
  if (out) *out = 1;
}

}  // namespace

std::string cuda_library_paths() {
  return library_of(reinterpret_cast<const void*>(&cudaRuntimeGetVersion), "libcudart") +
         library_of(reinterpret_cast<const void*>(&cublasLtGetVersion), "libcublasLt") +
         library_of(reinterpret_cast<const void*>(&cudnnGetVersion), "libcudnn");
}

std::string cuda_kernel_image_check() {
  cudaFuncAttributes attributes{};
  const cudaError_t err = cudaFuncGetAttributes(&attributes, probe_kernel);
  if (err == cudaSuccess) return "";
  cudaGetLastError();
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return fmt::format("this build's kernels cannot run on a sm_{}{} device ({}); rebuild with "
                     "-DCMAKE_CUDA_ARCHITECTURES={}{}",
                     major, minor, cudaGetErrorString(err), major, minor);
}

}  // namespace ditbatch
