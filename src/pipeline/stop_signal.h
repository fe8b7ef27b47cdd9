// Cooperative stopping on SIGUSR1 / SIGTERM / SIGINT (Slurm's early warning, preemption,
// Ctrl-C): the handler only records the signal; the generate loop stops taking new images
// and either finishes or abandons the current one (--on-signal; a second signal a second or
// more after the first abandons it in any case: Slurm's SIGTERM at the time limit after its
// early SIGUSR1, a second Ctrl-C).
#pragma once

namespace ditbatch {

void install_stop_handlers();
bool stop_requested();
int stop_signal_number();  // the signal that asked to stop, 0 if none
bool stop_escalated();     // a second signal came a second or more after the first
void request_stop_for_tests(int signal_number);

// Exit status of a run stopped by a signal with images left to make: the job scripts requeue
// on it (EX_TEMPFAIL from sysexits.h).
inline constexpr int kExitRequeue = 75;

}  // namespace ditbatch
