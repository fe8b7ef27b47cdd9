// The pure half of cuda_device.h: version names and the driver check over version numbers. No
// CUDA header, so that the CPU emulation (tools/device/emulate.py) builds it too.
#include <fmt/format.h>

#include "cuda_device.h"

namespace ditbatch {

namespace {

// The oldest driver series of each CUDA major version (NVIDIA's CUDA compatibility table).
const char* driver_series_for(int cuda_major) {
  switch (cuda_major) {
    case 12: return "the 525 series or newer";
    case 13: return "the 580 series or newer";
    default: return nullptr;
  }
}

}  // namespace

std::string cuda_version_name(int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); }
std::string cudnn_version_name(size_t v) { return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100); }
std::string cublas_version_name(size_t v) { return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100); }

std::string cuda_driver_problem(int built, int driver) {
  if (driver <= 0) return "no CUDA driver on this machine (no GPU)";
  const int built_major = built / 1000, driver_major = driver / 1000;
  if (driver_major >= built_major) return "";  // same major: minor-version compatibility
  const char* series = driver_series_for(built_major);
  const std::string where = fmt::format("run it where the driver supports CUDA {}{}{}", cuda_version_name(built),
                                        series ? " (" : "", series ? std::string(series) + ")" : "");
  const std::string head = fmt::format("this ditbatch was built with CUDA {}, the driver supports CUDA {}",
                                       cuda_version_name(built), cuda_version_name(driver));
  if (driver_major < 12)  // no toolkit ditbatch builds with runs on that driver
    return fmt::format("{}: ditbatch needs CUDA 12 or newer; {}", head, where);
  return fmt::format("{}: rebuild it with the cluster's CUDA {} toolkit (module load cuda/{}.x, 12.4 or newer), or {}",
                     head, driver_major, driver_major, where);
}

}  // namespace ditbatch
