// A file that must not outlive its process when that process is ended by SIGINT, SIGTERM or
// SIGHUP (Ctrl-C, scancel, a closed terminal): a weight file's temporary copy can be 57 GB.
// While a RemoveOnSignal lives, those signals remove the file and then end the process as
// they would have (same signal, same status); the previous handlers come back when it dies. A
// signal the process ignores (nohup's SIGHUP) stays ignored.
// One at a time per process.
#pragma once

#include <csignal>
#include <string>

namespace ditbatch {

class RemoveOnSignal {
 public:
  explicit RemoveOnSignal(const std::string& path);
  ~RemoveOnSignal();
  RemoveOnSignal(const RemoveOnSignal&) = delete;
  RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;

 private:
  struct sigaction previous_[3];
};

}  // namespace ditbatch
