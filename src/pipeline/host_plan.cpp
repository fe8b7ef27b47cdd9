#include "pipeline/host_plan.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/timer.h"
#include "pipeline/memory_plan.h"

namespace ditbatch {
namespace {

double gib(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kGiB); }

// A number from the first line of a file ("max" and unreadable: -1).
int64_t read_number(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(text);
}

}  // namespace

int64_t HostRunPlan::peak(bool offload_text_encoder) const {
  if (offload_text_encoder) return std::max(text_encoder + 256 * kMiB, denoiser + activations);
  return text_encoder + denoiser + activations;
}

std::string HostRunPlan::describe(bool offload_text_encoder) const {
  const std::string what =
      largest ? fmt::format(" (the {}x{} image's VAE decode or transformer pass)", largest->width, largest->height) : "";
  if (offload_text_encoder)
    return fmt::format("the larger of text encoder {:.1f} and transformer + VAE {:.1f} + activations {:.1f}{} = {:.1f} "
                       "GiB",
                       gib(text_encoder), gib(denoiser), gib(activations), what, gib(peak(true)));
  return fmt::format("text encoder {:.1f} + transformer + VAE {:.1f} + activations {:.1f}{} = {:.1f} GiB",
                     gib(text_encoder), gib(denoiser), gib(activations), what, gib(peak(false)));
}

HostMemory host_memory() {
  HostMemory memory{std::numeric_limits<int64_t>::max(), ""};
  auto consider = [&](int64_t bytes, const std::string& limit) {
    if (bytes >= 0 && bytes < memory.available) memory = {bytes, limit};
  };
  {
    std::ifstream meminfo("/proc/meminfo");
    std::string key, unit;
    int64_t kib = 0;
    while (meminfo >> key >> kib && std::getline(meminfo, unit))
      if (key == "MemAvailable:") consider(kib * 1024, "MemAvailable in /proc/meminfo");
  }
  {
    // cgroup v2: every level up from this process's group may set memory.max.
    std::ifstream cgroup("/proc/self/cgroup");
    for (std::string line; std::getline(cgroup, line);) {
      if (line.rfind("0::", 0) != 0) continue;
      for (std::string dir = line.substr(3);; dir = dir.substr(0, dir.rfind('/'))) {
        const std::string base = "/sys/fs/cgroup" + (dir == "/" ? std::string() : dir);
        const int64_t max = read_number(base + "/memory.max"), current = read_number(base + "/memory.current");
        if (max >= 0 && current >= 0) consider(max - current, base + "/memory.max");
        if (dir.empty() || dir == "/") break;
      }
    }
    // cgroup v1 (no limit reads as a huge number, which never decides)
    const int64_t limit = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
                  usage = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    if (limit >= 0 && usage >= 0) consider(limit - usage, "/sys/fs/cgroup/memory/memory.limit_in_bytes");
  }
  rlimit address_space{};
  if (getrlimit(RLIMIT_AS, &address_space) == 0 && address_space.rlim_cur != RLIM_INFINITY) {
    std::ifstream status("/proc/self/status");
    int64_t vm_kib = 0;
    for (std::string key; status >> key;)
      if (key == "VmSize:" && status >> vm_kib) break;
    consider(static_cast<int64_t>(address_space.rlim_cur) - vm_kib * 1024, "ulimit -v");
  }
  if (memory.limit.empty()) memory.available = -1;  // nothing says: no check
  return memory;
}

void check_host_memory(const HostRunPlan& plan, bool offload_text_encoder, const HostMemory& memory,
                       int ranks_on_node) {
  const int64_t ranks = std::max(1, ranks_on_node);
  const int64_t need = plan.peak(offload_text_encoder) * ranks;
  if (memory.available < 0 || need <= memory.available || !plan.largest) return;
  const ImageJob& job = *plan.largest;
  const bool offload_helps = !offload_text_encoder && plan.peak(true) * ranks <= memory.available;
  fail_input("{} ({}) is {}x{}: on the CPU backend this run needs about {:.1f} GiB of memory ({}{}{}), and {:.1f} GiB "
             "is available ({}). {}",
             fmt::format("image {}", job.index), job.origin, job.width, job.height, gib(need),
             ranks > 1 ? fmt::format("{} ranks on this node x (", ranks) : "", plan.describe(offload_text_encoder),
             ranks > 1 ? ")" : "", gib(memory.available), memory.limit,
             offload_helps ? "Run with --offload-text-encoder, which needs less here"
                           : "Use a smaller size, a GPU (--backend cuda), or a node with more memory");
}

double measure_flops_per_second(Backend& be) {
  constexpr int64_t n = 384;
  std::vector<float> values(static_cast<size_t>(n * n));
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(0.001f * static_cast<float>(i)) + 0.5f;
  const Tensor x = be.upload(Tensor::host_f32({n, n}, values), DType::F32);
  const Tensor w = be.upload_weight(Tensor::host_f32({n, n}, values));
  double best = std::numeric_limits<double>::max();
  for (int i = 0; i < 4; ++i) {  // the first warms up
    Stopwatch watch;
    (void)be.linear(x, w, nullptr);
    be.synchronize();
    if (i > 0) best = std::min(best, watch.seconds());
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / std::max(best, 1e-9);
}

}  // namespace ditbatch
