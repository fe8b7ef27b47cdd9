// What a run on the CPU backend will hold in host memory and how long its costliest image will
// take at least, worked out by its model family (ImageModel::host_run) from the weight file's
// configs and tensor sizes before any weight is read: a size that cannot fit (8192x8192 decodes through ~34 GB of activations even with
// the tiny model) is refused in a second with the numbers, and one that will take hours (the
// VAE's mid-block attention grows with the square of the image area) is announced with its
// estimate instead of running silently, deaf to everything but a signal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/backend.h"
#include "io/weight_store.h"
#include "pipeline/job.h"

namespace ditbatch {

struct HostRunPlan {
  // Bytes per rank: the CPU backend keeps every weight in f32.
  int64_t text_encoder = 0, denoiser = 0;  // transformer + VAE decoder
  int64_t activations = 0;                 // the largest image's transformer forward or VAE decode
  double image_flops = 0;                  // the costliest image: its denoising steps and its decode
  const ImageJob* costliest = nullptr;     // that image
  const ImageJob* largest = nullptr;       // the image whose activations are counted
  int64_t peak(bool offload_text_encoder) const;
  // "weights 0.1 + activations 33.8 (the VAE decode of 8192x8192) = 34.1 GiB"
  std::string describe(bool offload_text_encoder) const;
};

// The memory this process may still take: the least of MemAvailable, its cgroup's memory.max
// less what the cgroup uses (a Slurm job's --mem, a container's limit) and `ulimit -v` less its
// address space; `limit` names the one that decides.
struct HostMemory {
  int64_t available = 0;
  std::string limit;
};
HostMemory host_memory();

// Throws InputError with the plan, the memory and what to do when ranks_on_node ranks, each
// with the plan's peak, do not fit.
void check_host_memory(const HostRunPlan& plan, bool offload_text_encoder, const HostMemory& memory,
                       int ranks_on_node);

// FLOP/s of the backend's matrix product on this machine now (a few milliseconds of GEMM):
// the best the model's larger ops reach, so a time from it is a lower bound.
double measure_flops_per_second(Backend& backend);

}  // namespace ditbatch
