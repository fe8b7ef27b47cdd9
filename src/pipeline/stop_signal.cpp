#include "pipeline/stop_signal.h"

#include <time.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <initializer_list>

namespace ditbatch {

namespace {
// A signal handler may only touch lock-free atomics: this is the one process-wide state.
volatile std::sig_atomic_t g_stop_signal = 0;
std::atomic<int64_t> g_first_ms{0};
std::atomic<bool> g_escalated{false};
static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<bool>::is_always_lock_free);

int64_t monotonic_ms() {  // clock_gettime is async-signal-safe
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1000 + t.tv_nsec / 1000000;
}

// One event can deliver two signals at once (preemption: SIGTERM to the ranks, and the batch
// script's SIGUSR1): only a signal a second or more after the first is a second request.
constexpr int64_t kSecondSignalGapMs = 1000;

void record(int signal_number) {
  const int64_t now = monotonic_ms();
  if (g_stop_signal == 0) {
    g_first_ms = now;
    g_stop_signal = signal_number;  // the first one is the reason
  } else if (now - g_first_ms >= kSecondSignalGapMs) {
    g_escalated = true;
  }
}

extern "C" void on_stop_signal(int signal_number) { record(signal_number); }
}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int s : {SIGUSR1, SIGTERM, SIGINT}) sigaction(s, &action, nullptr);
}

bool stop_requested() { return g_stop_signal != 0; }
int stop_signal_number() { return g_stop_signal; }
bool stop_escalated() { return g_escalated; }
void request_stop_for_tests(int signal_number) { record(signal_number); }

}  // namespace ditbatch
