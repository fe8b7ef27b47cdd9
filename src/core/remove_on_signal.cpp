#include "core/remove_on_signal.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

#include "core/error.h"

namespace ditbatch {

namespace {

constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
// The handler may only read what is fixed before it can run: a plain buffer, not a std::string.
char g_path[4096];
std::atomic<bool> g_active{false};

extern "C" void remove_and_die(int signal_number) {
  ::unlink(g_path);  // async-signal-safe
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);  // the status a caller (shell, srun) expects for this signal
}

}  // namespace

RemoveOnSignal::RemoveOnSignal(const std::string& path) {
  DITBATCH_CHECK(path.size() < sizeof g_path, "path too long to remove on a signal: {}", path);
  DITBATCH_CHECK(!g_active.exchange(true), "one RemoveOnSignal at a time");
  std::memcpy(g_path, path.c_str(), path.size() + 1);
  struct sigaction action {};
  action.sa_handler = remove_and_die;
  sigemptyset(&action.sa_mask);
  for (int s : kSignals) sigaddset(&action.sa_mask, s);  // one cleanup, not three nested
  for (int i = 0; i < 3; ++i) {
    sigaction(kSignals[i], nullptr, &previous_[i]);
    // An ignored signal stays ignored (nohup's SIGHUP, SIGINT of a background job): it would
    // not have ended the process, so it must not now.
    if (previous_[i].sa_handler != SIG_IGN) sigaction(kSignals[i], &action, nullptr);
  }
}

RemoveOnSignal::~RemoveOnSignal() {
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &previous_[i], nullptr);
  g_active = false;
}

}  // namespace ditbatch
