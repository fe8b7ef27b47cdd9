// Cooperative stopping on SIGUSR1 / SIGTERM / SIGINT (Slurm's early warning, preemption,
// Ctrl-C): the handler records the signal and says it (one line, async-signal-safe, once
// acknowledge_stop_signals is called); the generate loop stops taking new images
// and either finishes or abandons the current one (--on-signal; a second signal a second or
// more after the first abandons it in any case: Slurm's SIGTERM at the time limit after its
// early SIGUSR1, a second Ctrl-C).
//
// Abandoning waits for the end of a denoising step, and one step (or a VAE decode, or a read
// that blocks) can take minutes. So a request to abandon (the second signal, or the first with
// --on-signal abandon) also starts a deadline of kAbandonGraceSeconds: a process that has not
// reached the end of its step by then, or that gets one more signal, ends at once from the
// handler: it removes its temporary files (a PNG or latents file being written), writes one
// line to stderr and exits kExitRequeue. Nothing is half-written: outputs are renamed into
// place whole and each manifest line is one write(); the image in progress is made again by
// the next run.
#pragma once

namespace ditbatch {

void install_stop_handlers();
// From then on a signal is said when it arrives, by the handler itself (a VAE decode or a read
// may keep the loop from saying it for minutes): one line on stderr and in the log file, in
// the log's format, saying what the process will do.
void acknowledge_stop_signals(int rank, int world_size, int log_fd);
void stop_acknowledging_signals();  // before the log file is closed
// --on-signal abandon: the first signal starts the deadline too.
void set_abandon_on_first_signal(bool abandon);
bool stop_requested();
int stop_signal_number();  // the signal that asked to stop, 0 if none
bool stop_escalated();     // a second signal came a second or more after the first
// The image was abandoned in time: the deadline is off (a further signal still ends the process).
void stop_deadline_met();
void request_stop_for_tests(int signal_number);

// Exit status of a run stopped by a signal with images left to make: the job scripts requeue
// on it (EX_TEMPFAIL from sysexits.h).
inline constexpr int kExitRequeue = 75;
// How long an abandoned image may take to reach the end of its step.
inline constexpr unsigned kAbandonGraceSeconds = 5;

}  // namespace ditbatch
