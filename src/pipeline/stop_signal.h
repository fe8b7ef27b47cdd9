// Cooperative stopping on SIGUSR1 / SIGTERM / SIGINT (Slurm's early warning, preemption,
// Ctrl-C): the handler only records the signal; the generate loop stops taking new images
// and either finishes or abandons the current one (--on-signal).
#pragma once

namespace ditbatch {

void install_stop_handlers();
bool stop_requested();
int stop_signal_number();  // the signal that asked to stop, 0 if none
void request_stop_for_tests(int signal_number);

// Exit status of a run stopped by a signal with images left to make: the job scripts requeue
// on it (EX_TEMPFAIL from sysexits.h).
inline constexpr int kExitRequeue = 75;

}  // namespace ditbatch
