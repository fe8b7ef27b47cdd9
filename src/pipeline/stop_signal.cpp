#include "pipeline/stop_signal.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>

#include <fmt/format.h>

#include "core/fs.h"

namespace ditbatch {

namespace {
// A signal handler may only touch lock-free atomics: this is the one process-wide state.
volatile std::sig_atomic_t g_stop_signal = 0;
std::atomic<int64_t> g_first_ms{0};
std::atomic<bool> g_escalated{false};
std::atomic<bool> g_abandon_on_first{false};
std::atomic<bool> g_deadline_armed{false};
static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<bool>::is_always_lock_free);

int64_t monotonic_ms() {  // clock_gettime is async-signal-safe
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1000 + t.tv_nsec / 1000000;
}

// One event can deliver two signals at once (preemption: SIGTERM to the ranks, and the batch
// script's SIGUSR1): only a signal a second or more after the first is a second request.
constexpr int64_t kSecondSignalGapMs = 1000;

// Ends the process now, from a handler: only async-signal-safe calls.
[[noreturn]] void end_now() {
  remove_temp_files_now();
  static const char message[] =
      "ditbatch: stopped at once by a signal: the image in progress is lost (made again by the next run); "
      "exit status 75\n";
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, message, sizeof message - 1);
  ::_exit(kExitRequeue);
}

// What the handler says on arrival: the log's "[rank r/N]" and its descriptor, set before any
// signal can need them (acknowledge_stop_signals), read only by the handler.
char g_rank_tag[48] = "";
std::atomic<int> g_log_fd{-1};
std::atomic<bool> g_acknowledge{false};
std::atomic<long> g_utc_offset_s{0};  // local time's, as the log's time stamps are local

// Appends text to a buffer, never past its end (async-signal-safe: no library call).
struct Line {
  char text[320];
  size_t size = 0;
  Line& operator<<(const char* s) {
    while (*s && size < sizeof text) text[size++] = *s++;
    return *this;
  }
  Line& digits(long value, int width) {
    char d[24];
    int n = 0;
    for (unsigned long v = value < 0 ? 0 : static_cast<unsigned long>(value); n == 0 || v > 0 || n < width; v /= 10)
      d[n++] = static_cast<char>('0' + v % 10);
    while (n > 0 && size < sizeof text) text[size++] = d[--n];
    return *this;
  }
};

const char* signal_name(int s) { return s == SIGTERM ? "SIGTERM" : s == SIGINT ? "SIGINT" : s == SIGUSR1 ? "SIGUSR1" : "a signal"; }

// "[2026-12-03 10:00:00.123]" from the clock (civil date from days: arithmetic only).
void time_stamp(Line& line) {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  const long s = static_cast<long>(t.tv_sec) + g_utc_offset_s.load();
  long days = s / 86400, rest = s % 86400;
  if (rest < 0) rest += 86400, --days;
  days += 719468;  // from 0000-03-01
  const long era = (days >= 0 ? days : days - 146096) / 146097, doe = days - era * 146097;
  const long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365, doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const long mp = (5 * doy + 2) / 153, day = doy - (153 * mp + 2) / 5 + 1, month = mp < 10 ? mp + 3 : mp - 9;
  const long year = yoe + era * 400 + (month <= 2);
  line << "[";
  line.digits(year, 4) << "-";
  line.digits(month, 2) << "-";
  line.digits(day, 2) << " ";
  line.digits(rest / 3600, 2) << ":";
  line.digits(rest / 60 % 60, 2) << ":";
  line.digits(rest % 60, 2) << ".";
  line.digits(t.tv_nsec / 1000000, 3) << "] ";
}

void say_on_arrival(int signal_number, const char* what) {
  if (!g_acknowledge) return;
  Line line;
  time_stamp(line);
  line << g_rank_tag << "[warning] " << signal_name(signal_number) << " (signal ";
  line.digits(signal_number, 1) << ") received: " << what << "\n";
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, line.text, line.size);
  if (const int fd = g_log_fd; fd >= 0) n = ::write(fd, line.text, line.size);
}

void arm_deadline() {
  if (!g_deadline_armed.exchange(true)) ::alarm(kAbandonGraceSeconds);
}

void record(int signal_number) {
  const int64_t now = monotonic_ms();
  if (g_stop_signal == 0) {
    g_first_ms = now;
    g_stop_signal = signal_number;  // the first one is the reason
    if (g_abandon_on_first) arm_deadline();
    say_on_arrival(signal_number, g_abandon_on_first
                                      ? "abandoning the image in progress, then stopping"
                                      : "taking no new image; the one in progress is finished, then the run "
                                        "stops (a second signal, a second or more later, abandons it)");
  } else if (now - g_first_ms >= kSecondSignalGapMs) {
    // A request after the abandon was asked for (a third Ctrl-C): no more waiting.
    if (g_escalated.exchange(true) || g_deadline_armed) end_now();
    arm_deadline();
    static_assert(kAbandonGraceSeconds == 5, "the line below says 5 s");
    say_on_arrival(signal_number, "abandoning the image in progress at the end of its step (the process ends at "
                                  "once if that takes over 5 s, or at one more signal)");
  }
}

extern "C" void on_stop_signal(int signal_number) { record(signal_number); }
extern "C" void on_deadline(int) { end_now(); }
}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int s : {SIGUSR1, SIGTERM, SIGINT}) sigaction(s, &action, nullptr);
  struct sigaction deadline {};
  deadline.sa_handler = on_deadline;
  sigemptyset(&deadline.sa_mask);
  sigaction(SIGALRM, &deadline, nullptr);
}

void acknowledge_stop_signals(int rank, int world_size, int log_fd) {
  g_acknowledge = false;  // (the tag is rewritten while no handler reads it)
  const std::string tag = fmt::format("[rank {}/{}] ", rank, world_size);
  std::snprintf(g_rank_tag, sizeof g_rank_tag, "%s", tag.c_str());
  const time_t now = ::time(nullptr);
  tm local{};
  localtime_r(&now, &local);
  g_utc_offset_s = local.tm_gmtoff;
  g_log_fd = log_fd;
  g_acknowledge = true;
}

void stop_acknowledging_signals() {
  g_acknowledge = false;
  g_log_fd = -1;
}

void set_abandon_on_first_signal(bool abandon) { g_abandon_on_first = abandon; }
bool stop_requested() { return g_stop_signal != 0; }
int stop_signal_number() { return g_stop_signal; }
bool stop_escalated() { return g_escalated; }
void stop_deadline_met() {
  ::alarm(0);
}
void request_stop_for_tests(int signal_number) { record(signal_number); }

}  // namespace ditbatch
