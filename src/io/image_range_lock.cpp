#include "io/image_range_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/fs.h"

namespace ditbatch {

namespace {

// The lock file's notes, read through its descriptor (at most the last 1 MiB).
std::string read_notes(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return "";
  const off_t from = std::max<off_t>(0, st.st_size - (1 << 20));
  std::string text(static_cast<size_t>(st.st_size - from), '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), from);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return text;
}

// The note a holder left for pid `pid` (the last one: pids are reused), or "pid P".
std::string holder_note(int fd, pid_t pid) {
  std::string found = pid > 0 ? fmt::format("pid {}", pid) : "";
  std::istringstream notes(read_notes(fd));
  for (std::string line; std::getline(notes, line);) {
    const auto colon = line.find(": pid ");
    if (colon == std::string::npos || pid <= 0) continue;
    const std::string who = line.substr(colon + 2);  // "pid P on HOST"
    if (who.rfind(fmt::format("pid {} on ", pid), 0) == 0) found = who;
  }
  return found;
}

}  // namespace

ImageRangeLock::ImageRangeLock(const std::string& dir, int64_t first, int64_t end)
    : path_(dir + "/.ditbatch-run.lock") {
  DITBATCH_CHECK(end > first && first >= 0, "image range [{}, {}) to lock", first, end);
  // Never through a symbolic link (the folder may be writable by others: a planted link would
  // make this run append to the file it points to), never blocking on a FIFO.
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP)
      fail_input("{}: is a symbolic link, which ditbatch does not follow in an output folder; remove it", path_);
    fail_input("{}: cannot create the run's lock: {}", path_, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail_input("{}: is {}, not the run's lock file; remove it", path_, describe_file_type(st.st_mode));
  }
  struct flock range {};
  range.l_type = F_WRLCK;
  range.l_whence = SEEK_SET;
  range.l_start = static_cast<off_t>(first);
  range.l_len = static_cast<off_t>(end - first);
  if (::fcntl(fd, F_SETLK, &range) != 0) {
    const int err = errno;
    if (err != EACCES && err != EAGAIN) {  // ENOLCK, ENOSYS, EINVAL: no record locks here
      ::close(fd);
      return;
    }
    struct flock other = range;
    const bool known = ::fcntl(fd, F_GETLK, &other) == 0 && other.l_type != F_UNLCK;
    const std::string who = known ? holder_note(fd, other.l_pid) : "";
    ::close(fd);
    const std::string theirs =
        known ? fmt::format(" images {}..{}", other.l_start,
                            other.l_len > 0 ? fmt::format("{}", other.l_start + other.l_len - 1) : std::string("end"))
              : " images";
    fail_input("another ditbatch run{} is making{} in {}, of the images {}..{} this run would make: wait for it to end, "
               "or give another --out",
               who.empty() ? "" : " (" + who + ")", theirs, dir, first, end - 1);
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string note = fmt::format("images {}-{}: pid {} on {}\n", first, end - 1, ::getpid(), host);
  if (::write(fd, note.data(), note.size()) != static_cast<ssize_t>(note.size())) {
    // The lock holds without its note; a refused run then names the pid alone.
  }
  fd_ = fd;
}

ImageRangeLock::~ImageRangeLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the range; the file stays (removing it would race a new holder)
}

}  // namespace ditbatch
