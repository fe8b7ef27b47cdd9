#include "app/cpu_threads.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

namespace ditbatch {

int threads_per_rank(int requested, const World& world) {
  if (requested > 0) return requested;
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && *env) return omp_get_max_threads();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / world.local_size());
}

void warn_about_threads(int threads, const World& world, const Log& log) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int bound = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  const int node = static_cast<int>(std::thread::hardware_concurrency());
  if (bound <= 0 || node <= 0) return;
  const int cores = bound < node ? bound : std::max(1, node / world.local_size());
  if (threads > cores)
    log.warn("{} CPU threads per rank (--threads or OMP_NUM_THREADS), but this rank has {} core(s){}: each thread "
             "then waits for a time slice at every step, which is many times slower; use at most {}",
             threads, cores,
             bound < node ? " (its CPU binding)"
                          : (world.local_size() > 1 ? fmt::format(" ({} cores shared by {} ranks)", node, world.local_size())
                                                    : std::string()),
             cores);
}

}  // namespace ditbatch
