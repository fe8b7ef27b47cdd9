// What the two cuDNN paths (CudnnSdpa, CudnnConv) share: a plan cache (handle, plans by shape,
// refused shapes) and whether the path is off, with why. cudnn.h stays out of the backend's
// includes: the cache lives behind a pointer.
#pragma once

#include <memory>
#include <string>

namespace ditbatch::cuda {

namespace cudnn {
class PlanCache;
}

class CudnnPath {
 public:
  CudnnPath(const CudnnPath&) = delete;
  CudnnPath& operator=(const CudnnPath&) = delete;

  void disable(const std::string& why);
  // Destroys the plans and the handle (before the stream they are bound to goes); a later
  // run() makes them again.
  void release();
  bool disabled() const;
  // "available (cuDNN 91900, 3 plans built)" or "disabled: <why>".
  std::string status() const;

 protected:
  // unusable: why the cuDNN loaded cannot serve this path at all ("" when it can).
  explicit CudnnPath(const std::string& unusable);
  ~CudnnPath();
  cudnn::PlanCache& cache() const;

 private:
  std::unique_ptr<cudnn::PlanCache> cache_;
};

}  // namespace ditbatch::cuda
