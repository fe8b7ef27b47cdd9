// Finding GPUs, and what this binary was built with against what this machine has. Any CUDA
// error (no driver, no device, a stub libcuda) means "no GPU": the caller falls back to the CPU
// backend or skips GPU tests, visibly. A driver too old for the toolkit this was built with is
// not "no GPU": cuda_driver_problem() names it before anything touches the device.
//
// Versions are the libraries' own numbers: CUDA as CUDART_VERSION (12040 = 12.4), cuBLAS as
// CUBLAS_VERSION (120405 = 12.4.5), cuDNN 9 as CUDNN_VERSION (90100 = 9.1.0).
#pragma once

#include <cstddef>
#include <string>

namespace ditbatch {

// Number of usable CUDA devices; 0 on any error.
int cuda_device_count();
// One line per device ("0: NVIDIA H200, sm_90, 139.8 GiB"), or why there is none.
std::string cuda_describe_devices();
// The device's UUID as hex: the identity of a GPU whatever index CUDA_VISIBLE_DEVICES gives it
// in this process ("" on error).
std::string cuda_device_uuid(int device);
// Runtime versions found at run time: "cudart 13000, driver 13000, cuBLASLt ..., cuDNN 91900".
std::string cuda_library_versions();
// Where the CUDA libraries this process loaded live: "libcudart -> /path/...", one per line
// (dladdr on one symbol of each).
std::string cuda_library_paths();
// Empty when this build's kernels can run on the current device, else why not (e.g. built
// for sm_90 only and the device is sm_80).
std::string cuda_kernel_image_check();

// ---- what this binary was built with (compile time) --------------------------------------------

struct CudaBuild {
  int cuda = 0;                   // CUDART_VERSION of the toolkit it was compiled with
  int cublas = 0;                 // CUBLAS_VERSION of the cuBLAS headers
  int cudnn = 0;                  // CUDNN_VERSION of the cuDNN headers
  std::string architectures;      // CMAKE_CUDA_ARCHITECTURES as built: "80-real 90-real 100"
  bool cudnn_sdpa = false;        // the cuDNN SDPA attention path is compiled in (headers >= 9.13.0)
  bool cudnn_sdpa_padding = false;  // and pads lengths to buckets (SEQ_LEN tensors: headers >= 9.15.0)
  bool cudnn_conv = false;        // the cuDNN convolution + bias path is compiled in (any cuDNN 9)
  bool cudnn_deviceless = false;  // cuDNN's deviceless heuristics (headers >= 9.8.0; the CI graph test)
};
CudaBuild cuda_build();

// ---- what this process found (run time; none of it needs a GPU) ---------------------------------

struct CudaRuntime {
  int driver = 0;                // cudaDriverGetVersion: the newest CUDA the driver runs; 0 = no driver
  int cudart = 0;                // cudaRuntimeGetVersion of the libcudart loaded
  size_t cublaslt = 0;           // cublasLtGetVersion of the libcublasLt loaded
  size_t cublaslt_cudart = 0;    // the CUDA that libcublasLt was built for
  size_t cudnn = 0;              // cudnnGetVersion of the libcudnn loaded
  size_t cudnn_cudart = 0;       // the CUDA that libcudnn was built for
};
CudaRuntime cuda_runtime();

// "12.4" for 12040; "9.1.0" for cuDNN's 90100; "12.4.5" for cuBLAS's 120405.
std::string cuda_version_name(int cudart_version);
std::string cudnn_version_name(size_t cudnn_version);
std::string cublas_version_name(size_t cublas_version);

// Why a binary built with CUDA `built` cannot run on a driver that supports CUDA `driver`
// (both CUDART_VERSION numbers), "" when it can. 0 = no driver: "no CUDA driver on this
// machine (no GPU)". A driver of an older major version is refused in one line:
//   "this ditbatch was built with CUDA 13.0, the driver supports CUDA 12.4: rebuild with the
//    cluster's toolkit (e.g. module load cuda/12.4), or run where the driver supports CUDA 13.0
//    (the 580 series or newer)"
// (one line, no line break). An older minor version of the same major is fine (CUDA's
// minor-version compatibility: 12.8 binaries run on a 12.4 driver; our SASS needs no JIT).
std::string cuda_driver_problem(int built, int driver);
// The same for this binary (CUDART_VERSION) and this machine's driver (cudaDriverGetVersion).
// The backend's construction and `--backend auto|cuda` ask it before anything else.
std::string cuda_driver_problem();

// What `ditbatch --version` (and selftest) print for the CUDA side, one item per line:
//   CUDA backend: built with CUDA 13.0, cuBLAS 13.1.0, cuDNN 9.19.0 headers, for 80-real 90-real 100
//   cuDNN paths compiled in: SDPA attention yes, lengths padded to buckets yes, convolution yes
//   found at run time: driver for CUDA 13.0; cudart 13.0, cuBLASLt 13.1.0 (CUDA 13.0), cuDNN 9.19.0 (CUDA 13.0)
//   driver: ok | driver: REFUSED: <cuda_driver_problem()> | driver: none (no CUDA driver on this machine (no GPU))
//   GPUs: <cuda_describe_devices(), one per line>
std::string cuda_version_report();

}  // namespace ditbatch
