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
  std::function<void(const std::string&)> warn;  // one-line warnings (to the backend's log)

  DeviceBlock scratch(size_t bytes, const char* what) const { return allocator->allocate(bytes, what); }
  // After a launch: checks it (and waits for it with sync_each_op).
  void launched(const char* op) const { check_launch(op, stream, sync_each_op); }
};

}  // namespace ditbatch::cuda
