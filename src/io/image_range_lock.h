// One run per image of an output folder at a time. A job submitted twice, a second mpirun
// beside a running one, or an array resubmitted with another --array count would make the
// same images again, doubling the GPU time spent: the later run is refused, naming the
// earlier. Rank 0 of a run locks the byte range [first, end) of DIR/.ditbatch-run.lock, its
// images' indices (POSIX record locks: overlapping ranges conflict, other array slices do
// not). The kernel releases the lock however the holder ends (kill -9, a requeue). Limits of
// the file system carry over: where locks are local to a node (NFS mounted nolock, Lustre
// localflock) two nodes do not see each other's; on NFSv3 a crashed node's lock stays until
// it reboots (the refusal then names a process that is gone: remove nothing, wait or use
// another --out).
#pragma once

#include <cstdint>
#include <string>

namespace ditbatch {

class ImageRangeLock {
 public:
  // Locks images [first, end) (end > first) and appends "images A-B: pid P on HOST" to the
  // file for a refused run to quote. Throws InputError naming the holder when another process
  // holds an overlapping range. A file system without record locks (some parallel file systems
  // unless mounted with them) cannot protect: then nothing is held and `held()` is false.
  ImageRangeLock(const std::string& dir, int64_t first, int64_t end);
  ~ImageRangeLock();
  ImageRangeLock(const ImageRangeLock&) = delete;
  ImageRangeLock& operator=(const ImageRangeLock&) = delete;

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace ditbatch
