// Choosing the backend: --backend auto|cpu|cuda. auto takes CUDA when this build has it and a
// GPU answers, else the CPU backend (which every test here runs).
#pragma once

#include <memory>
#include <string>

#include "core/backend.h"
#include "core/log.h"

namespace ditbatch {

std::unique_ptr<Backend> make_backend(const std::string& kind, int device, const Log& log);
// Number of usable GPUs (0 without a CUDA build or without a GPU).
int visible_gpu_count();
// The GPU side of `ditbatch --version` and selftest: what this binary was built with (CUDA,
// cuBLAS, cuDNN, architectures, the cuDNN paths compiled in), what this machine has (driver,
// libraries, GPUs) and whether the driver is refused (kernels/cuda_device.h,
// cuda_version_report); one line saying so in a build without CUDA. Lines end with '\n'.
std::string gpu_support_report();
// A stable identity of visible GPU `device` (its UUID), to find ranks that share one GPU.
std::string gpu_identity(int device);

}  // namespace ditbatch
