#include "cluster/shard.h"

#include <cstdlib>
#include <numeric>

#include "core/error.h"

namespace ditbatch {

ShardMode parse_shard_mode(const std::string& name) {
  if (name == "auto") return ShardMode::Auto;
  if (name == "contiguous") return ShardMode::Contiguous;
  if (name == "strided") return ShardMode::Strided;
  if (name == "dynamic") return ShardMode::Dynamic;
  fail_input("--shard '{}' (expected auto, contiguous, strided or dynamic)", name);
}

std::string shard_mode_name(ShardMode mode) {
  switch (mode) {
    case ShardMode::Auto: return "auto";
    case ShardMode::Contiguous: return "contiguous";
    case ShardMode::Strided: return "strided";
    case ShardMode::Dynamic: return "dynamic";
  }
  return "?";
}

std::pair<int64_t, int64_t> contiguous_range(int64_t n, int64_t parts, int64_t part) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = part * base + std::min(part, extra);
  return {begin, begin + base + (part < extra ? 1 : 0)};
}

namespace {
int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (*end) fail_input("{}={} is not an integer", name, v);
  return x;
}
}  // namespace

ArraySlice ArraySlice::resolve(int64_t index_option, int64_t count_option) {
  ArraySlice s;
  const int64_t task = env_int("SLURM_ARRAY_TASK_ID", -1);
  // --array=0-9:2 gives ids 0, 2, ..., 8: the slice is (id - min) / step.
  const int64_t step = std::max<int64_t>(1, env_int("SLURM_ARRAY_TASK_STEP", 1));
  s.index = index_option >= 0 ? index_option : (task >= 0 ? (task - env_int("SLURM_ARRAY_TASK_MIN", 0)) / step : 0);
  s.count = count_option >= 1 ? count_option : (task >= 0 ? env_int("SLURM_ARRAY_TASK_COUNT", 1) : 1);
  if (s.count < 1 || s.index < 0 || s.index >= s.count)
    fail_input("array slice {} of {} ({}): the slice must be in [0, count)", s.index, s.count,
               task >= 0 && (index_option < 0 || count_option < 1)
                   ? fmt::format("from SLURM_ARRAY_TASK_ID {}, _MIN {}, _STEP {}, _COUNT {}", task,
                                 env_int("SLURM_ARRAY_TASK_MIN", 0), step, env_int("SLURM_ARRAY_TASK_COUNT", 1))
                   : "from --array-index / --array-count");
  return s;
}

ShardMode resolve_shard_mode(ShardMode requested, const std::vector<ImageJob>& jobs, bool offload_text_encoder) {
  if (requested == ShardMode::Dynamic && offload_text_encoder)
    fail_input("--offload-text-encoder needs to know a rank's prompts up front: use --shard contiguous or strided");
  if (requested != ShardMode::Auto) return requested;
  if (offload_text_encoder) return ShardMode::Contiguous;
  // An edit's cost also follows its input images: their count and sizes (each adds its condition
  // tokens to every step).
  auto input_sizes = [](const ImageJob& j) {
    std::vector<std::pair<int64_t, int64_t>> sizes;
    for (const InputImage& image : j.images) sizes.emplace_back(image.width, image.height);
    return sizes;
  };
  for (const auto& j : jobs)
    if (j.width != jobs[0].width || j.height != jobs[0].height || j.steps != jobs[0].steps ||
        j.true_cfg != jobs[0].true_cfg || input_sizes(j) != input_sizes(jobs[0]))
      return ShardMode::Dynamic;
  return ShardMode::Contiguous;
}

namespace {

// Indices [begin, end) handed out through the shared counter, one at a time.
class DynamicWork final : public WorkSource {
 public:
  DynamicWork(std::unique_ptr<World::Counter> counter, int64_t begin, int64_t end)
      : counter_(std::move(counter)), begin_(begin), end_(end) {}
  std::optional<int64_t> next() override {
    if (exhausted_) return std::nullopt;
    const int64_t i = begin_ + counter_->fetch_add(1);
    if (i >= end_) {
      exhausted_ = true;
      return std::nullopt;
    }
    return i;
  }
  std::optional<std::vector<int64_t>> planned() const override { return std::nullopt; }
  std::vector<int64_t> candidates() const override {  // any of the slice
    std::vector<int64_t> all(static_cast<size_t>(end_ - begin_));
    std::iota(all.begin(), all.end(), begin_);
    return all;
  }

 private:
  std::unique_ptr<World::Counter> counter_;
  int64_t begin_, end_;
  bool exhausted_ = false;
};

}  // namespace

std::pair<int64_t, int64_t> slice_images(int64_t n_jobs, const ArraySlice& slice, int64_t images_per_unit) {
  const int64_t units = (n_jobs + images_per_unit - 1) / images_per_unit;
  const auto [lo, hi] = contiguous_range(units, slice.count, slice.index);
  return {std::min(n_jobs, lo * images_per_unit), std::min(n_jobs, hi * images_per_unit)};
}

namespace {

// The images of the units another source hands out, a unit's images one after the other: a
// WebDataset tar is made whole by the one process that takes it.
class UnitWork final : public WorkSource {
 public:
  UnitWork(std::unique_ptr<WorkSource> units, int64_t images_per_unit, int64_t n_jobs)
      : units_(std::move(units)), per_unit_(images_per_unit), n_jobs_(n_jobs) {}
  std::optional<int64_t> next() override {
    if (next_ >= end_) {
      const std::optional<int64_t> unit = units_->next();
      if (!unit) return std::nullopt;
      next_ = *unit * per_unit_;
      end_ = std::min(n_jobs_, next_ + per_unit_);
    }
    return next_++;
  }
  std::optional<std::vector<int64_t>> planned() const override {
    auto units = units_->planned();
    if (!units) return std::nullopt;
    return expand(*units);
  }
  std::vector<int64_t> candidates() const override { return expand(units_->candidates()); }

 private:
  std::vector<int64_t> expand(const std::vector<int64_t>& units) const {
    std::vector<int64_t> images;
    for (const int64_t u : units)
      for (int64_t i = u * per_unit_; i < std::min(n_jobs_, (u + 1) * per_unit_); ++i) images.push_back(i);
    return images;
  }
  std::unique_ptr<WorkSource> units_;
  int64_t per_unit_, n_jobs_;
  int64_t next_ = 0, end_ = 0;
};

}  // namespace

std::unique_ptr<WorkSource> make_work(ShardMode mode, const ArraySlice& slice, int64_t n_jobs, const World& world,
                                      int64_t images_per_unit) {
  if (images_per_unit > 1) {
    const int64_t units = (n_jobs + images_per_unit - 1) / images_per_unit;
    return std::make_unique<UnitWork>(make_work(mode, slice, units, world, 1), images_per_unit, n_jobs);
  }
  const auto [lo, hi] = contiguous_range(n_jobs, slice.count, slice.index);
  if (mode == ShardMode::Dynamic) return std::make_unique<DynamicWork>(world.make_counter(), lo, hi);
  std::vector<int64_t> mine;
  if (mode == ShardMode::Strided) {
    for (int64_t i = lo; i < hi; ++i)
      if ((i - lo) % world.size() == world.rank()) mine.push_back(i);
  } else {
    const auto [b, e] = contiguous_range(hi - lo, world.size(), world.rank());
    for (int64_t i = lo + b; i < lo + e; ++i) mine.push_back(i);
  }
  return std::make_unique<ListWork>(std::move(mine));
}

}  // namespace ditbatch
