// Which images a process makes, in what order: the runner asks a WorkSource for the next index
// into the job list. A fixed list here; the MPI layer (src/cluster/shard.h) adds shards of a
// world and a shared counter, without the pipeline knowing of ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace ditbatch {

// Which image a process makes next (an index into the job list).
class WorkSource {
 public:
  virtual ~WorkSource() = default;
  virtual std::optional<int64_t> next() = 0;
  // Every index this source will hand out, when known up front (static shards); needed to
  // encode all prompts before releasing the text encoder.
  virtual std::optional<std::vector<int64_t>> planned() const = 0;
  // Every index this source may hand out (a superset where the order is decided at run time):
  // the schedules the transformer's conditioning at load must cover.
  virtual std::vector<int64_t> candidates() const = 0;
};

// A fixed list of indices, in order.
class ListWork final : public WorkSource {
 public:
  explicit ListWork(std::vector<int64_t> indices) : indices_(std::move(indices)) {}
  std::optional<int64_t> next() override {
    if (pos_ >= indices_.size()) return std::nullopt;
    return indices_[pos_++];
  }
  std::optional<std::vector<int64_t>> planned() const override { return indices_; }
  std::vector<int64_t> candidates() const override { return indices_; }

 private:
  std::vector<int64_t> indices_;
  size_t pos_ = 0;
};

}  // namespace ditbatch
