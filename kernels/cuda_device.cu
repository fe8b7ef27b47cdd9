// Device side of cuda_device.h: whether this build's kernels have an image the current device
// can run (the host queries are in cuda_device.cpp).
#include "cuda_device.h"

#include <cuda_runtime.h>

#include <fmt/format.h>

namespace ditbatch {

namespace {

__global__ void probe_kernel(int* out) {
  if (out) *out = 1;
}

}  // namespace

std::string cuda_kernel_image_check() {
  cudaFuncAttributes attributes{};
  const cudaError_t err = cudaFuncGetAttributes(&attributes, probe_kernel);
  if (err == cudaSuccess) return "";
  cudaGetLastError();
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return fmt::format("this build's kernels ({}) cannot run on a sm_{}{} device ({}); rebuild with "
                     "-DCMAKE_CUDA_ARCHITECTURES={}{}",
                     cuda_build().architectures, major, minor, cudaGetErrorString(err), major, minor);
}

}  // namespace ditbatch
