#include "pipeline/stop_signal.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <initializer_list>

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

void arm_deadline() {
  if (!g_deadline_armed.exchange(true)) ::alarm(kAbandonGraceSeconds);
}

void record(int signal_number) {
  const int64_t now = monotonic_ms();
  if (g_stop_signal == 0) {
    g_first_ms = now;
    g_stop_signal = signal_number;  // the first one is the reason
    if (g_abandon_on_first) arm_deadline();
  } else if (now - g_first_ms >= kSecondSignalGapMs) {
    // A request after the abandon was asked for (a third Ctrl-C): no more waiting.
    if (g_escalated.exchange(true) || g_deadline_armed) end_now();
    arm_deadline();
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

void set_abandon_on_first_signal(bool abandon) { g_abandon_on_first = abandon; }
bool stop_requested() { return g_stop_signal != 0; }
int stop_signal_number() { return g_stop_signal; }
bool stop_escalated() { return g_escalated; }
void stop_deadline_met() {
  ::alarm(0);
}
void request_stop_for_tests(int signal_number) { record(signal_number); }

}  // namespace ditbatch
