// One run per slice of an output folder at a time. A job submitted twice (or a second mpirun
// beside a running one) would make every image again, doubling the GPU time spent: the
// second run is refused, naming the first. Array tasks (other slices) and the ranks of one
// run do not contend: only rank 0 of a run takes its slice's lock. The kernel releases it when
// the holder ends, however it ends (kill -9, a requeue), so a rerun never finds it stale.
#pragma once

#include <cstdint>
#include <string>

namespace ditbatch {

class SliceLock {
 public:
  // Takes DIR/.ditbatch-slice-I-of-N.lock ("-run" for a run without slices) and writes
  // "pid P on HOST" into it. Throws InputError naming the holder when another process has it.
  // A file system without locks (some parallel file systems unless mounted with them) cannot
  // protect: then nothing is held and `held()` is false.
  SliceLock(const std::string& dir, int64_t slice_index, int64_t slice_count);
  ~SliceLock();
  SliceLock(const SliceLock&) = delete;
  SliceLock& operator=(const SliceLock&) = delete;

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace ditbatch
