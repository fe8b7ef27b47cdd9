#include "core/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <atomic>

#include "core/error.h"

namespace ditbatch {

Log::Log(int rank, int world_size, const std::string& level, const std::string& log_file, bool quiet_stderr)
    : rank_(rank) {
  static std::atomic<int> instance{0};  // spdlog loggers need distinct names
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (quiet_stderr) sinks.back()->set_level(spdlog::level::warn);
  if (!log_file.empty()) {
    try {
      sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_file, false));
    } catch (const spdlog::spdlog_ex& e) {
      fail_input("cannot open log file '{}': {}", log_file, e.what());
    }
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
