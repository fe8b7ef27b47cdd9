#include "core/install_paths.h"

#include <filesystem>
#include <system_error>

namespace ditbatch {

std::string executable_path() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.string();
}

std::string data_path(const std::string& installed, const std::string& in_source) {
  const std::string exe = executable_path();
  if (!exe.empty()) {
    const std::filesystem::path shared = std::filesystem::path(exe).parent_path().parent_path() / "share/ditbatch" / installed;
    std::error_code ec;
    if (std::filesystem::exists(shared, ec)) return shared.string();
  }
  return std::string(DITBATCH_SOURCE_DIR) + "/" + in_source;
}

}  // namespace ditbatch
