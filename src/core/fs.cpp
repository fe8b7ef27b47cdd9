#include "core/fs.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ditbatch {
namespace fs = std::filesystem;

std::string temp_path_for(const std::string& final_path) {
  fs::path p(final_path);
  fs::path dir = p.parent_path();
  std::string name = fmt::format(".{}.tmp.{}", p.filename().string(), ::getpid());
  return (dir.empty() ? fs::path(name) : dir / name).string();
}

std::vector<std::string> remove_orphaned_temp_files(const std::string& dir, const std::string& final_name) {
  const std::string prefix = "." + final_name;  // "." alone: any file's
  const auto cutoff = fs::file_time_type::clock::now() - std::chrono::minutes(10);
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir.empty() ? "." : dir, ec)) {
    const std::string name = e.path().filename().string();
    const size_t tmp = name.rfind(".tmp.");
    if (!name.starts_with(prefix) || tmp == std::string::npos || tmp == 0 ||
        (!final_name.empty() && tmp != prefix.size()) || !e.is_regular_file(ec))
      continue;
    const std::string pid_text = name.substr(tmp + 5);
    if (pid_text.empty() || pid_text.size() > 9 || pid_text.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    const bool alive = ::kill(pid, 0) == 0 || errno == EPERM;
    if (alive || pid == ::getpid() || e.last_write_time(ec) >= cutoff) continue;
    if (fs::remove(e.path(), ec)) removed.push_back(e.path().string());
  }
  return removed;
}

namespace {
void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) fail("{}: cannot open to fsync: {}", path, std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && !(directory && err == EINVAL)) fail("{}: fsync failed: {}", path, std::strerror(err));
}
}  // namespace

void commit_file(const std::string& tmp_path, const std::string& final_path) {
  fsync_path(tmp_path, false);
  if (std::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp_path.c_str());
    fail("cannot rename {} to {}: {}", tmp_path, final_path, std::strerror(err));
  }
  fs::path dir = fs::path(final_path).parent_path();
  fsync_path(dir.empty() ? "." : dir.string(), true);
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  std::string tmp = temp_path_for(path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail_input("{}: cannot create: {}", tmp, std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      out.close();
      std::remove(tmp.c_str());
      fail("{}: write failed (disk full?)", path);
    }
  }
  commit_file(tmp, path);
}

std::string read_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail_input("{}: is a folder, not a file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input("{}: cannot open: {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail_input("{}: read error", path);
  return ss.str();
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace ditbatch
