#include "io/slice_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/fs.h"

namespace ditbatch {

SliceLock::SliceLock(const std::string& dir, int64_t slice_index, int64_t slice_count)
    : path_(slice_count > 1 ? fmt::format("{}/.ditbatch-slice-{}-of-{}.lock", dir, slice_index, slice_count)
                            : dir + "/.ditbatch-run.lock") {
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail_input("{}: cannot create the run's lock: {}", path_, std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {  // ENOLCK, ENOSYS, EINVAL: no locks on this file system
      ::close(fd);
      return;
    }
    std::string holder = read_file(path_);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    ::close(fd);
    fail_input("another ditbatch run{} is making {} in {} (it holds {}): wait for it to end, or give another --out",
               holder.empty() ? "" : " (" + holder + ")",
               slice_count > 1 ? fmt::format("slice {} of {}", slice_index, slice_count) : "these images", dir, path_);
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string who = fmt::format("pid {} on {}\n", ::getpid(), host);
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    // The lock holds without its note; the refusal then names no holder.
  }
  fd_ = fd;
}

SliceLock::~SliceLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race a new holder)
}

}  // namespace ditbatch
