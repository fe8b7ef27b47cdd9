#include "pipeline/stop_signal.h"

#include <csignal>
#include <initializer_list>

namespace ditbatch {

namespace {
// A signal handler can only touch a lock-free atomic: this is the one process-wide state.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int signal_number) { g_stop_signal = signal_number; }
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
void request_stop_for_tests(int signal_number) { g_stop_signal = signal_number; }

}  // namespace ditbatch
