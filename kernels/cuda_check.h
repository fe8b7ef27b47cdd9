// Error handling shared by the CUDA sources. This header compiles as C++17 (nvcc) and C++20
// (g++): it declares the throwing helpers; cuda_check.cpp defines them with ditbatch::fail so
// every CUDA failure surfaces as a ditbatch::Error naming the op, the call and the shapes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <sstream>
#include <string>

namespace ditbatch::cuda {

// Concatenates anything streamable: cat("linear: M ", m, " K ", k).
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// Throws a ditbatch::Error with the message.
[[noreturn]] void fail(const std::string& message);
// Throws when err != cudaSuccess: "<what>: <CUDA error name>: <description>".
void check(cudaError_t err, const std::string& what);
// After a kernel launch: throws if the launch failed (bad configuration, missing kernel
// image). With sync_each_op it also waits for the kernel, so an asynchronous fault is
// reported by the op that caused it (DITBATCH_CUDA_SYNC=1).
void check_launch(const char* op, cudaStream_t stream, bool sync_each_op);
// Takes the error left pending by earlier work, if any (cudaSuccess when none): the runtime's
// last-error slot is then clear for the next check_launch.
cudaError_t take_pending_error();

}  // namespace ditbatch::cuda
