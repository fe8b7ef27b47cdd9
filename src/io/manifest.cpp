#include "io/manifest.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ext/stdio_filebuf.h>
#include <filesystem>
#include <istream>

#include "core/error.h"
#include "core/fs.h"

namespace ditbatch {
namespace fs = std::filesystem;

namespace {
const char* kPartsDir = ".manifest";
}

namespace {

// A file of the output folder opened for writing: never through a symbolic link (the folder
// may be writable by others), never blocking on a FIFO, and only a regular file.
int open_own_file(const std::string& path, int flags, const char* what) {
  const int fd = ::open(path.c_str(), flags | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    struct stat st {};
    if (err == ELOOP && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
      fail_input("{}: is a symbolic link, which ditbatch does not follow in an output folder; remove it", path);
    fail_input("{}: cannot open {}: {}", path, what, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail_input("{}: is {}, not a file ({} is kept there); remove it", path, describe_file_type(st.st_mode), what);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

ManifestPart::ManifestPart(const std::string& out_dir, const std::string& run_id, int rank) {
  const fs::path dir = fs::path(out_dir) / kPartsDir;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    fail_input("{}: cannot create the manifest folder: {}", dir.string(), std::strerror(errno));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))  // a link to a folder elsewhere: refused
    fail_input("{}: is {}, not the folder of this run's manifest parts; remove it", dir.string(),
               S_ISLNK(st.st_mode) ? "a symbolic link" : describe_file_type(st.st_mode));
  path_ = (dir / fmt::format("{}-rank{:05d}.jsonl", run_id, rank)).string();
  fd_ = open_own_file(path_, O_WRONLY | O_APPEND, "for appending the manifest");
  ::flock(fd_, LOCK_EX);  // "this part's writer is alive" (see merge_manifest)
}

ManifestPart::~ManifestPart() {
  if (fd_ >= 0) ::close(fd_);
}

void ManifestPart::append(const nlohmann::json& line) {
  // One write per line: a process ended at any moment leaves whole lines (and at worst a last
  // one without its newline, which readers ignore).
  const std::string text = line.dump() + "\n";
  if (::write(fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size()) || ::fsync(fd_) != 0)
    fail("{}: cannot append the manifest line (disk full?): {}", path_, std::strerror(errno));
}

namespace {

void read_lines_into(const fs::path& path, std::map<int64_t, nlohmann::json>& out) {
  // Only a regular file, never through a link, never blocking: else it holds no lines of ours.
  const int fd = open_regular_file(path.string(), false, nullptr);
  if (fd < 0) return;
  __gnu_cxx::stdio_filebuf<char> buffer(fd, std::ios::in);  // closes fd
  std::istream in(&buffer);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no trailing newline: a line cut by a kill
    try {
      nlohmann::json j = nlohmann::json::parse(line);
      if (j.is_object() && j.contains("index") && j["index"].is_number_integer()) out[j["index"].get<int64_t>()] = j;
    } catch (const nlohmann::json::exception&) {
      // a torn line from a killed writer: its image is simply not done
    }
  }
}

std::vector<fs::path> part_files(const std::string& out_dir) {
  std::vector<fs::path> parts;
  const fs::path dir = fs::path(out_dir) / kPartsDir;
  std::error_code ec;
  // A link (to a folder elsewhere, or in it) is not a part: merging removes the parts it read.
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return parts;
  std::vector<std::pair<fs::file_time_type, fs::path>> found;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".jsonl" && fs::is_regular_file(e.symlink_status(ec)))
      found.emplace_back(e.last_write_time(ec), e.path());
  // Oldest first, so that a later run's line for the same index wins.
  std::sort(found.begin(), found.end());
  for (auto& [time, path] : found) parts.push_back(std::move(path));
  return parts;
}

}  // namespace

std::map<int64_t, nlohmann::json> read_manifest(const std::string& out_dir) {
  std::map<int64_t, nlohmann::json> lines;
  read_lines_into(fs::path(out_dir) / "manifest.jsonl", lines);
  for (const auto& part : part_files(out_dir)) read_lines_into(part, lines);
  return lines;
}

size_t merge_manifest(const std::string& out_dir) {
  const std::string lock_path = (fs::path(out_dir) / ".manifest.lock").string();
  const int lock = open_own_file(lock_path, O_RDWR, "as the manifest's lock");
  ::flock(lock, LOCK_EX);
  // Parts whose writer is gone are locked (by us) before reading, so nothing can be appended
  // to them between the read and their removal; live parts are read and kept.
  std::vector<std::pair<fs::path, int>> finished_parts;
  for (const auto& part : part_files(out_dir)) {
    const int fd = open_regular_file(part.string(), false, nullptr);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) finished_parts.emplace_back(part, fd);
    else ::close(fd);
  }
  const auto lines = read_manifest(out_dir);
  std::string text;
  for (const auto& [index, line] : lines) text += line.dump() + "\n";
  write_file_atomic((fs::path(out_dir) / "manifest.jsonl").string(), text);
  for (const auto& [part, fd] : finished_parts) {
    fs::remove(part);
    ::close(fd);
  }
  std::error_code ec;
  fs::remove(fs::path(out_dir) / kPartsDir, ec);  // only if empty
  ::flock(lock, LOCK_UN);
  ::close(lock);
  return lines.size();
}

}  // namespace ditbatch
