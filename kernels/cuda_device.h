// Finding GPUs. Any CUDA error (no driver, no device, a stub libcuda) means "no GPU": the
// caller falls back to the CPU backend or skips GPU tests, visibly.
#pragma once

#include <string>

namespace ditbatch {

// Number of usable CUDA devices; 0 on any error.
int cuda_device_count();
// One line per device ("0: NVIDIA H200, sm_90, 139.8 GiB"), or why there is none.
std::string cuda_describe_devices();
// Runtime versions found at run time: "cudart 13000, driver 13000, cuBLASLt ..., cuDNN 91900".
std::string cuda_library_versions();

}  // namespace ditbatch
