// Host side of cuda_device.h: device queries, the versions built with and found, the driver
// check on this machine. Plain C++ (no kernels), so CI compiles it against older CUDA / cuDNN
// headers too (tools/ci/cuda_portability.sh). The version names and the driver check over
// numbers are in cuda_versions.cpp.
#include "cuda_device.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <dlfcn.h>
#include <fmt/format.h>

#include "cudnn_graph.h"

#ifndef DITBATCH_CUDA_ARCHITECTURES  // CMake passes CMAKE_CUDA_ARCHITECTURES as built
#define DITBATCH_CUDA_ARCHITECTURES "unknown"
#endif

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

}  // namespace

std::string cuda_library_paths() {
  return library_of(reinterpret_cast<const void*>(&cudaRuntimeGetVersion), "libcudart") +
         library_of(reinterpret_cast<const void*>(&cublasLtGetVersion), "libcublasLt") +
         library_of(reinterpret_cast<const void*>(&cudnnGetVersion), "libcudnn");
}

CudaBuild cuda_build() {
  CudaBuild b;
  b.cuda = CUDART_VERSION;
  b.cublas = CUBLAS_VERSION;
  b.cudnn = CUDNN_VERSION;
  b.architectures = DITBATCH_CUDA_ARCHITECTURES;
  b.cudnn_sdpa = cuda::cudnn::sdpa_compiled();
  b.cudnn_sdpa_padding = cuda::cudnn::sdpa_seq_len_compiled();
  b.cudnn_conv = true;  // nothing the convolution graph uses is newer than cuDNN 9.0 (cudnn_graph.h)
  b.cudnn_deviceless = cuda::cudnn::deviceless_compiled();
  return b;
}

CudaRuntime cuda_runtime() {
  CudaRuntime r;
  if (cudaDriverGetVersion(&r.driver) != cudaSuccess) r.driver = 0;
  if (cudaRuntimeGetVersion(&r.cudart) != cudaSuccess) r.cudart = 0;
  r.cublaslt = cublasLtGetVersion();
  r.cublaslt_cudart = cublasLtGetCudartVersion();
  r.cudnn = cudnnGetVersion();
  r.cudnn_cudart = cudnnGetCudartVersion();
  return r;
}

std::string cuda_driver_problem() { return cuda_driver_problem(CUDART_VERSION, cuda_runtime().driver); }

std::string cuda_version_report() {
  const CudaBuild b = cuda_build();
  const CudaRuntime r = cuda_runtime();
  std::string out = fmt::format("CUDA backend: built with CUDA {}, cuBLAS {}, cuDNN {} headers, for {}\n",
                                cuda_version_name(b.cuda), cublas_version_name(b.cublas),
                                cudnn_version_name(static_cast<size_t>(b.cudnn)), b.architectures);
  out += fmt::format("cuDNN paths compiled in: SDPA attention {}{}, convolution {}\n",
                     b.cudnn_sdpa ? "yes" : "no (headers older than 9.13.0: attention takes the GEMM path)",
                     !b.cudnn_sdpa                ? ""
                     : b.cudnn_sdpa_padding       ? ", lengths padded to buckets yes"
                                                  : ", lengths padded to buckets no (headers older than 9.15.0: a plan "
                                                    "per prompt length)",
                     b.cudnn_conv ? "yes" : "no");
  out += fmt::format("found at run time: {}; cudart {}, cuBLASLt {} (CUDA {}), cuDNN {} (CUDA {})\n",
                     r.driver > 0 ? "driver for CUDA " + cuda_version_name(r.driver) : std::string("no driver"),
                     cuda_version_name(r.cudart), cublas_version_name(r.cublaslt),
                     cuda_version_name(static_cast<int>(r.cublaslt_cudart)), cudnn_version_name(r.cudnn),
                     cuda_version_name(static_cast<int>(r.cudnn_cudart)));
  const std::string problem = cuda_driver_problem(b.cuda, r.driver);
  if (r.driver <= 0) out += "driver: none (" + problem + ")\n";
  else if (!problem.empty()) out += "driver: REFUSED: " + problem + "\n";
  else out += "driver: ok\n";
  std::string devices = r.driver > 0 ? cuda_describe_devices() : "none";
  if (!devices.empty() && devices.back() == '\n') devices.pop_back();
  out += "GPUs: " + (devices.find('\n') == std::string::npos ? devices : "\n" + devices) + "\n";
  return out;
}

}  // namespace ditbatch
