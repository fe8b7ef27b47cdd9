// Logging with a rank prefix: "[2026-11-29 10:00:00.123] [rank 1/4] [info] message".
// A Log is passed explicitly to whoever needs one (no global logger).
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace ditbatch {

class Log {
 public:
  // Logs to stderr; with log_file non-empty also to that file (appending). quiet_stderr keeps
  // stderr to warnings and errors (ranks > 0 when every rank has its own log file).
  Log(int rank = 0, int world_size = 1, const std::string& level = "info", const std::string& log_file = "",
      bool quiet_stderr = false);

  template <typename... Args>
  void debug(spdlog::format_string_t<Args...> f, Args&&... a) const {
    logger_->debug(f, std::forward<Args>(a)...);
  }
  template <typename... Args>
  void info(spdlog::format_string_t<Args...> f, Args&&... a) const {
    logger_->info(f, std::forward<Args>(a)...);
  }
  template <typename... Args>
  void warn(spdlog::format_string_t<Args...> f, Args&&... a) const {
    logger_->warn(f, std::forward<Args>(a)...);
  }
  template <typename... Args>
  void error(spdlog::format_string_t<Args...> f, Args&&... a) const {
    logger_->error(f, std::forward<Args>(a)...);
  }
  void flush() const { logger_->flush(); }
  int rank() const { return rank_; }
  // The log file's descriptor (-1 without one): a signal handler may write a line to it.
  int file_descriptor() const { return file_fd_; }
  // A log that prints nothing (tests, library calls that need one).
  static Log quiet();

 private:
  std::shared_ptr<spdlog::logger> logger_;
  int rank_ = 0;
  int file_fd_ = -1;
};

}  // namespace ditbatch
