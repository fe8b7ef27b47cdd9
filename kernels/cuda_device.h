// Finding GPUs. Any CUDA error (no driver, no device, a stub libcuda) means "no GPU": the
// caller falls back to the CPU backend or skips GPU tests, visibly.
#pragma once

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
// Where the CUDA libraries this process loaded live: "libcudnn.so.9 -> /path/...", one per
// line (dladdr on one symbol of each).
std::string cuda_library_paths();
// Empty when this build's kernels can run on the current device, else why not (e.g. built
// for sm_90 only and the device is sm_80).
std::string cuda_kernel_image_check();

}  // namespace ditbatch
