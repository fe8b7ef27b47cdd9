// What the two cuDNN paths (CudnnSdpa, CudnnConv) share: a plan cache (handle, plans by shape,
// refused shapes) and whether the path is off, with why. cudnn.h stays out of the backend's
// includes: the cache lives behind a pointer.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ditbatch::cuda {

struct CudaContext;
namespace cudnn {
class PlanCache;
struct Graph;
}  // namespace cudnn

class CudnnPath {
 public:
  CudnnPath(const CudnnPath&) = delete;
  CudnnPath& operator=(const CudnnPath&) = delete;

  void disable(const std::string& why);
  // Destroys the plans and the handle (before the stream they are bound to goes); a later
  // run() makes them again.
  void release();
  bool disabled() const;
  // "available (cuDNN 91900, 3 plans of 2 engine configs, one kernel cache)[; note]" or
  // "disabled: <why>".
  std::string status() const;

  // RanNewEngine: ran, with an engine config this path had not run before (the caller checks
  // that first output against its own path: once per engine config, not once per shape).
  // NoPlan: cuDNN has no plan for this shape (the path stays on for others); Failed: the
  // path should be switched off. Neither wrote the output.
  enum class Result { Ran, RanNewEngine, NoPlan, Failed };

 protected:
  // unusable: why the cuDNN loaded cannot serve this path at all ("" when it can).
  // dynamic_shapes: the path's shapes vary within a job (attention: every prompt length), so
  // its plans share one kernel cache where cuDNN can (cudnn::PlanCache).
  CudnnPath(const std::string& unusable, bool dynamic_shapes);
  ~CudnnPath();
  cudnn::PlanCache& cache() const;
  // What status() adds while the path is on (how the path uses cuDNN).
  void set_note(std::string note) { note_ = std::move(note); }
  // Queues the plan for key (built with make_graph the first time) on ctx's stream, the tensors
  // paired with their uids, a workspace from ctx's allocator. `what` names the call in launch
  // errors; on Failed, *error is describe() (the shape) + the cuDNN version + the cause.
  Result run_plan(const CudaContext& ctx, const std::array<int64_t, 5>& key,
                  const std::function<cudnn::Graph()>& make_graph, const std::vector<int64_t>& uids,
                  const std::vector<void*>& pointers, const char* what,
                  const std::function<std::string()>& describe, std::string* error);

 private:
  std::unique_ptr<cudnn::PlanCache> cache_;
  std::string note_;
};

}  // namespace ditbatch::cuda
