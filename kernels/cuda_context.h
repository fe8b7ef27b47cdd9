// What every launcher needs: the device, the one stream, the allocator for scratch space and
// the GEMM engine (C++17: included by .cu files).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>

#include "cuda_check.h"
#include "cuda_memory.h"

namespace ditbatch::cuda {

class GemmEngine;

struct CudaContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  DeviceAllocator* allocator = nullptr;
  GemmEngine* gemm = nullptr;
  int sm_count = 0;
  size_t max_shared_per_block = 0;  // opt-in limit for dynamic shared memory
  bool sync_each_op = false;        // DITBATCH_CUDA_SYNC=1: wait after every launch
  int64_t attention_chunk_rows = 0;  // the GEMM attention path's query rows per chunk at most (0: by memory)
  std::function<void(const std::string&)> warn;  // one-line warnings (to the backend's log)

  DeviceBlock scratch(size_t bytes, const char* what) const { return allocator->allocate(bytes, what); }
  // After a launch: checks it (and waits for it with sync_each_op).
  void launched(const char* op) const { check_launch(op, stream, sync_each_op); }

  // Around a library call that launches kernels of its own (cuBLASLt, cuDNN). Its returned
  // status is what says whether it failed, so the runtime's last-error slot is not read for it:
  // before the call, an error pending from earlier work is taken and said as that work's (never
  // blamed on this call); after it, whatever the library left pending is cleared (not blamed on
  // our next launch), and with sync_each_op the stream is waited for, naming this call for a
  // fault in its kernels.
  void library_call_starts(const char* op) const {
    const cudaError_t pending = take_pending_error();
    if (pending != cudaSuccess && warn)
      warn(cat(op, ": CUDA error ", static_cast<int>(pending), " (", cudaGetErrorName(pending),
               ") was pending before this call: left by earlier work, not by ", op, "; cleared"));
  }
  void library_call_done(const char* op) const {
    take_pending_error();
    if (sync_each_op) check(cudaStreamSynchronize(stream), cat(op, ": execution (DITBATCH_CUDA_SYNC=1)"));
  }
};

}  // namespace ditbatch::cuda
