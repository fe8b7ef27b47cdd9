// How many OpenMP threads a rank's CPU work uses, decided the same way by every command that
// computes (generate, selftest).
#pragma once

#include "cluster/world.h"
#include "core/log.h"

namespace ditbatch {

// `requested` (--threads) if positive, else OMP_NUM_THREADS if set, else the node's cores
// shared among its ranks.
int threads_per_rank(int requested, const World& world);

// More OpenMP threads than cores makes every barrier wait for a time slice (30x slower with
// --threads 10000 on 2 cores): said as a warning. A rank bound to its own cores (Slurm's
// binding) may use those; unbound ranks share the node's.
void warn_about_threads(int threads, const World& world, const Log& log);

}  // namespace ditbatch
