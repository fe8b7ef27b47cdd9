// Wall-clock timing: a stopwatch and a scope that adds its duration to a counter.
#pragma once

#include <chrono>

namespace ditbatch {

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void restart() { start_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Adds the seconds spent in its scope to *total.
class ScopedTimer {
 public:
  explicit ScopedTimer(double* total) : total_(total) {}
  ~ScopedTimer() { *total_ += watch_.seconds(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double* total_;
  Stopwatch watch_;
};

}  // namespace ditbatch
