#include "cuda_check.h"

#include "core/error.h"

namespace ditbatch::cuda {

void fail(const std::string& message) { throw Error(message); }

void check(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  ditbatch::fail("{}: CUDA error {} ({}): {}", what, static_cast<int>(err), cudaGetErrorName(err),
                 cudaGetErrorString(err));
}

void check_launch(const char* op, cudaStream_t stream, bool sync_each_op) {
  check(cudaGetLastError(), cat(op, ": kernel launch"));
  if (sync_each_op) check(cudaStreamSynchronize(stream), cat(op, ": kernel execution (DITBATCH_CUDA_SYNC=1)"));
}

cudaError_t take_pending_error() { return cudaGetLastError(); }

}  // namespace ditbatch::cuda
