// Weights read once per node: the node's first rank reads each tensor from the .h5 and
// broadcasts it to the other ranks of the node (MPI shared-memory transport), so a node with
// 8 ranks reads a 57 GB file once, not 8 times, with memory O(largest tensor) in flight.
#pragma once

#include "cluster/world.h"
#include "model/weights.h"

namespace ditbatch {

class NodeWeightReader final : public WeightReader {
 public:
  explicit NodeWeightReader(const World& world) : world_(world) {}
  std::unique_ptr<WeightBinder> binder(const Component& component, const std::string& prefix) const override;
  std::map<std::string, std::string> files(const Component& component) const override;
  Tensor file_tensor(const std::string& path, const std::string& name) const override;

 private:
  const World& world_;
};

}  // namespace ditbatch
