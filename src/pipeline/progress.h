// Progress of a generate run: a live bar (steps, images done/total, images/min, ETA) when
// stderr is a terminal, otherwise a log line every few seconds (cluster logs stay readable).
#pragma once

#include <cstdint>
#include <string>

#include "core/log.h"
#include "core/timer.h"

namespace ditbatch {

class Progress {
 public:
  // interactive: draw a bar on stderr (only when it is a terminal); log_every_s otherwise.
  Progress(const Log& log, int64_t images_total, bool interactive, double log_every_s = 10.0);
  ~Progress();
  void image_started(int64_t index);
  void step(int done, int total);
  void image_finished();  // made (done or failed): one fewer to go
  void image_skipped();   // already complete: one fewer to go, not counted in the rate
  int64_t finished() const { return finished_; }
  // "3/10 images, 2.10 images/min, ETA 3m20s"
  std::string status() const;

 private:
  void report(bool force);
  const Log& log_;
  int64_t total_, finished_ = 0, made_ = 0, current_ = -1;
  int step_ = 0, steps_ = 0;
  bool interactive_;
  double log_every_s_;
  Stopwatch since_start_, since_report_, since_first_image_;
  bool drew_bar_ = false;
};

std::string format_duration(double seconds);  // "1h02m", "3m20s", "42s"

}  // namespace ditbatch
