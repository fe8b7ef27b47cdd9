#include "core/log.h"

#include <fcntl.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/fs.h"

namespace ditbatch {
namespace {

// A log file appended to as every file of an output folder is written: never through a
// symbolic link (the log folder may be writable by others: a planted rank-00000.log link would
// have the log appended to whatever it names), and only a regular file (a FIFO would block).
class AppendFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit AppendFileSink(const std::string& path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      const int err = errno;
      struct stat st {};
      if (err == ELOOP && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
        fail_input("log file {}: is a symbolic link, which ditbatch does not follow in a log folder; remove it", path);
      if (err == ENXIO && ::stat(path.c_str(), &st) == 0)
        fail_input("log file {}: is {}, not a file; remove it", path, describe_file_type(st.st_mode));
      fail_input("log file {}: cannot open: {}", path, std::strerror(err));
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      fail_input("log file {}: is {}, not a file; remove it", path, describe_file_type(st.st_mode));
    }
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  }
  ~AppendFileSink() override { ::close(fd_); }
  int fd() const { return fd_; }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {  // a log line that cannot be written is dropped: logging never stops a run
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  void flush_() override {}

 private:
  int fd_ = -1;
};

}  // namespace

Log::Log(int rank, int world_size, const std::string& level, const std::string& log_file, bool quiet_stderr)
    : rank_(rank) {
  static std::atomic<int> instance{0};  // spdlog loggers need distinct names
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (quiet_stderr) sinks.back()->set_level(spdlog::level::warn);
  if (!log_file.empty()) {
    auto file = std::make_shared<AppendFileSink>(log_file);
    file_fd_ = file->fd();
    sinks.push_back(std::move(file));
  }
  logger_ = std::make_shared<spdlog::logger>(fmt::format("ditbatch-{}", instance++), sinks.begin(),
                                             sinks.end());
  logger_->set_pattern(fmt::format("[%Y-%m-%d %H:%M:%S.%e] [rank {}/{}] [%l] %v", rank, world_size));
  auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off")
    fail_input("unknown log level '{}' (expected debug, info, warn, error or off)", level);
  logger_->set_level(parsed);
  logger_->flush_on(spdlog::level::info);
}

Log Log::quiet() { return Log(0, 1, "off"); }

}  // namespace ditbatch
