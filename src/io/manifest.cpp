#include "io/manifest.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/fs.h"

namespace ditbatch {
namespace fs = std::filesystem;

namespace {
const char* kPartsDir = ".manifest";
}

ManifestPart::ManifestPart(const std::string& out_dir, const std::string& run_id, int rank) {
  const fs::path dir = fs::path(out_dir) / kPartsDir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail_input("{}: cannot create the manifest folder: {}", dir.string(), ec.message());
  path_ = (dir / fmt::format("{}-rank{:05d}.jsonl", run_id, rank)).string();
  file_ = std::fopen(path_.c_str(), "ab");
  if (!file_) fail_input("{}: cannot open for appending: {}", path_, std::strerror(errno));
  ::flock(::fileno(file_), LOCK_EX);  // "this part's writer is alive" (see merge_manifest)
}

ManifestPart::~ManifestPart() {
  if (file_) std::fclose(file_);
}

void ManifestPart::append(const nlohmann::json& line) {
  const std::string text = line.dump() + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0 ||
      ::fsync(::fileno(file_)) != 0)
    fail("{}: cannot append the manifest line (disk full?)", path_);
}

namespace {

void read_lines_into(const fs::path& path, std::map<int64_t, nlohmann::json>& out) {
  std::ifstream in(path);
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
  if (!fs::is_directory(dir, ec)) return parts;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".jsonl") parts.push_back(e.path());
  // Oldest first, so that a later run's line for the same index wins.
  std::sort(parts.begin(), parts.end(), [](const fs::path& a, const fs::path& b) {
    auto ta = fs::last_write_time(a), tb = fs::last_write_time(b);
    return ta != tb ? ta < tb : a < b;
  });
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
  const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
  if (lock < 0) fail_input("{}: cannot create the manifest lock: {}", lock_path, std::strerror(errno));
  ::flock(lock, LOCK_EX);
  // Parts whose writer is gone are locked (by us) before reading, so nothing can be appended
  // to them between the read and their removal; live parts are read and kept.
  std::vector<std::pair<fs::path, int>> finished_parts;
  for (const auto& part : part_files(out_dir)) {
    const int fd = ::open(part.c_str(), O_RDONLY);
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
