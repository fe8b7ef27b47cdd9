#include "pipeline/progress.h"

#include <unistd.h>

#include <cstdio>

namespace ditbatch {

std::string format_duration(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

Progress::Progress(const Log& log, int64_t images_total, bool interactive, double log_every_s)
    : log_(log), total_(images_total), interactive_(interactive && ::isatty(STDERR_FILENO)), log_every_s_(log_every_s) {}

Progress::~Progress() {
  if (drew_bar_) std::fputc('\n', stderr);
}

void Progress::image_started(int64_t index) {
  current_ = index;
  step_ = 0;
  if (made_ == 0) since_first_image_.restart();
  report(false);
}

void Progress::step(int done, int total) {
  step_ = done;
  steps_ = total;
  report(false);
}

void Progress::image_finished() {
  ++finished_;
  ++made_;
  current_ = -1;
  report(finished_ == total_);
}

void Progress::image_skipped() {
  ++finished_;
  report(finished_ == total_);
}

std::string Progress::status() const {
  const double elapsed = since_first_image_.seconds();
  const double per_min = made_ > 0 && elapsed > 0 ? 60.0 * static_cast<double>(made_) / elapsed : 0.0;
  std::string eta = "?";
  if (made_ > 0 && per_min > 0) eta = format_duration(60.0 * static_cast<double>(total_ - finished_) / per_min);
  std::string out = fmt::format("{}/{} images", finished_, total_);
  if (current_ >= 0 && steps_ > 0) out += fmt::format(", image {} step {}/{}", current_, step_, steps_);
  return out + fmt::format(", {:.2f} images/min, ETA {}", per_min, eta);
}

void Progress::report(bool force) {
  if (interactive_) {
    const int width = 30;
    const double frac = total_ > 0 ? static_cast<double>(finished_) / static_cast<double>(total_) : 1.0;
    const int filled = static_cast<int>(frac * width);
    std::fprintf(stderr, "\r[%s%s] %s   ", std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(width - filled), '.').c_str(), status().c_str());
    std::fflush(stderr);
    drew_bar_ = true;
    return;
  }
  if (force || since_report_.seconds() >= log_every_s_) {
    log_.info("progress: {}", status());
    since_report_.restart();
  }
}

}  // namespace ditbatch
