#include "io/manifest.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "io/json_text.h"
#include "io/manifest_fields.h"

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

void ManifestPart::append(const nlohmann::json& line) { append(std::vector<nlohmann::json>{line}); }

void ManifestPart::append(const std::vector<nlohmann::json>& lines) {
  // One write: a process ended at any moment leaves whole lines (and at worst a last one
  // without its newline, which readers ignore).
  std::string text;
  for (const auto& line : lines) text += line.dump() + "\n";
  if (::write(fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size()) || ::fsync(fd_) != 0)
    fail("{}: cannot append the manifest line (disk full?): {}", path_, std::strerror(errno));
}

namespace {

// Calls `line` with each whole line of a regular file (never through a link, never blocking:
// else it holds no lines of ours), the byte offset it starts at and its number (from 1). A last
// line without its newline was cut by a kill: not passed on.
void for_each_raw_line(const fs::path& path,
                       const std::function<void(std::string_view, uint64_t offset, int64_t number)>& line) {
  const int fd = open_regular_file(path.string(), false, nullptr);
  if (fd < 0) return;
  std::vector<char> buffer(size_t{1} << 22);
  size_t have = 0;        // bytes in buffer
  uint64_t consumed = 0;  // file offset of buffer[0]
  int64_t number = 0;
  for (;;) {
    if (have == buffer.size()) buffer.resize(buffer.size() * 2);  // a line longer than the buffer
    const ssize_t n = ::read(fd, buffer.data() + have, buffer.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const size_t end = have + static_cast<size_t>(n);
    size_t start = 0;
    for (size_t nl; (nl = std::string_view(buffer.data() + start, end - start).find('\n')) != std::string_view::npos;) {
      line(std::string_view(buffer.data() + start, nl), consumed + start, ++number);
      start += nl + 1;
    }
    std::memmove(buffer.data(), buffer.data() + start, end - start);
    have = end - start;
    consumed += start;
  }
  ::close(fd);
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

std::optional<nlohmann::json> parse_manifest_line(std::string_view text, const std::set<std::string>& fields) {
  // Fields no reader of this pass needs (timings, host, ...) are dropped as they are parsed.
  const nlohmann::json::parser_callback_t drop_others = [&fields](int depth, nlohmann::json::parse_event_t event,
                                                                 nlohmann::json& parsed) {
    if (depth != 1 || event != nlohmann::json::parse_event_t::key) return true;
    const std::string& key = parsed.get_ref<const std::string&>();
    return key == "index" || fields.count(key) > 0;
  };
  nlohmann::json j = parse_json(text, fields.empty() ? nullptr : drop_others, false);
  // A torn line from a killed writer, or not an object with an integer index: its image is
  // simply not done.
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  const auto it = j.find("index");
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return j;
}

namespace {

// A file's name as the folder's reader knows it: "manifest.jsonl", ".manifest/<part>".
std::string name_in_folder(const fs::path& path) {
  return path.parent_path().filename() == kPartsDir ? (fs::path(kPartsDir) / path.filename()).string()
                                                    : path.filename().string();
}

}  // namespace

void ManifestDamage::add(std::string_view file, int64_t line_number) {
  ++lines;
  if (first.size() < 3) first.push_back(fmt::format("{} line {}", file, line_number));
}

void ManifestDamage::note(std::string_view text, std::string_view file, int64_t line_number) {
  if (text.find_first_not_of(" \t\r") != std::string_view::npos) add(file, line_number);
}

std::string ManifestDamage::describe(const std::string& out_dir) const {
  if (lines == 0) return "";
  return fmt::format("{}: {} line(s) of its manifest files are not manifest lines (not a JSON object with an integer "
                     "\"index\"): {}{}; skipped, so no image counts as made by them",
                     out_dir, lines, fmt::join(first, ", "),
                     lines > std::ssize(first) ? fmt::format(" and {} more", lines - std::ssize(first)) : "");
}

void for_each_manifest_text(const std::string& out_dir,
                            const std::function<void(std::string_view line, const ManifestLineAt& where)>& visit) {
  auto each = [&](const fs::path& path) {
    const std::string name = name_in_folder(path);
    for_each_raw_line(path, [&](std::string_view text, uint64_t, int64_t number) { visit(text, {name, number}); });
  };
  each(fs::path(out_dir) / "manifest.jsonl");
  for (const auto& part : part_files(out_dir)) each(part);
}

void for_each_manifest_line(const std::string& out_dir,
                            const std::function<void(int64_t index, const nlohmann::json& line)>& visit,
                            const std::set<std::string>& fields, ManifestDamage* damage) {
  for_each_manifest_text(out_dir, [&](std::string_view text, const ManifestLineAt& where) {
    if (const auto j = parse_manifest_line(text, fields)) visit((*j)["index"].get<int64_t>(), *j);
    else if (damage) damage->note(text, where.file, where.line_number);
  });
}

std::map<int64_t, nlohmann::json> read_manifest(const std::string& out_dir) {
  std::map<int64_t, nlohmann::json> lines;
  for_each_manifest_line(out_dir, [&](int64_t index, const nlohmann::json& line) { lines[index] = line; });
  return lines;
}

namespace {

// Where the last line of each index is: the file (0: manifest.jsonl, then the parts), offset
// and length. 24 bytes an image: a million-image manifest is merged without holding its lines.
struct LineSpot {
  int64_t index;
  uint64_t offset;
  uint32_t length, file;
};

// The last line of each index in `files` (a later file's is a later run's), by index; the
// lines that are none counted in `damage`.
std::vector<LineSpot> last_line_spots(const std::vector<fs::path>& files, ManifestDamage* damage = nullptr) {
  std::vector<LineSpot> spots;
  const std::set<std::string> index_only = {"index"};
  ManifestFieldParser fast;
  ManifestFields fields;
  for (uint32_t f = 0; f < files.size(); ++f) {
    const std::string name = name_in_folder(files[f]);
    for_each_raw_line(files[f], [&](std::string_view text, uint64_t offset, int64_t number) {
      const auto verdict = fast.parse(text, fields);
      std::optional<int64_t> index;
      if (verdict == ManifestFieldParser::Fields) index = fields.index;
      else if (verdict == ManifestFieldParser::Unsure)
        if (const auto j = parse_manifest_line(text, index_only)) index = (*j)["index"].get<int64_t>();
      if (index) spots.push_back({*index, offset, static_cast<uint32_t>(text.size()), f});
      else if (damage) damage->note(text, name, number);
    });
  }
  // By index, the last line read winning.
  std::stable_sort(spots.begin(), spots.end(), [](const LineSpot& a, const LineSpot& b) { return a.index < b.index; });
  size_t kept = 0;
  for (size_t i = 0; i < spots.size(); ++i)
    if (i + 1 == spots.size() || spots[i + 1].index != spots[i].index) spots[kept++] = spots[i];
  spots.resize(kept);
  return spots;
}

// Calls `visit` with the text of each spot's line, read back from its file in the order given.
void read_back_spots(const std::vector<fs::path>& files, const std::vector<LineSpot>& spots,
                     const std::function<void(std::string_view)>& visit) {
  struct Descriptors {
    std::vector<int> fds;
    ~Descriptors() {
      for (const int fd : fds)
        if (fd >= 0) ::close(fd);
    }
  } open;
  for (const auto& file : files) open.fds.push_back(open_regular_file(file.string(), false, nullptr));
  std::string line;
  for (const LineSpot& s : spots) {
    line.resize(s.length);
    const ssize_t n = ::pread(open.fds[s.file], line.data(), s.length, static_cast<off_t>(s.offset));
    if (n != static_cast<ssize_t>(s.length))
      fail("{}: cannot read back the manifest line at byte {} that was read a moment ago ({}): was the file "
           "replaced or cut while ditbatch read it? Run again: nothing was changed",
           files[s.file].string(), s.offset,
           n < 0 ? std::strerror(errno) : fmt::format("{} of its {} bytes are there", n, s.length));
    visit(line);
  }
}

std::vector<fs::path> manifest_files(const std::string& out_dir) {
  std::vector<fs::path> files = {fs::path(out_dir) / "manifest.jsonl"};
  for (auto& part : part_files(out_dir)) files.push_back(std::move(part));
  return files;
}

}  // namespace

void for_each_last_manifest_line(const std::string& out_dir,
                                 const std::function<void(int64_t index, const nlohmann::json& line)>& visit,
                                 const std::set<std::string>& fields, ManifestDamage* damage) {
  const std::vector<fs::path> files = manifest_files(out_dir);
  read_back_spots(files, last_line_spots(files, damage), [&](std::string_view text) {
    if (const auto j = parse_manifest_line(text, fields)) visit((*j)["index"].get<int64_t>(), *j);
  });
}

size_t merge_manifest(const std::string& out_dir, bool* folded_any) {
  const std::string lock_path = (fs::path(out_dir) / ".manifest.lock").string();
  const int lock = open_own_file(lock_path, O_RDWR, "as the manifest's lock");
  ::flock(lock, LOCK_EX);
  // Parts whose writer is gone are locked (by us) before reading, so nothing can be appended
  // to them between the read and their removal; live parts are read and kept.
  std::vector<std::pair<fs::path, int>> finished_parts;
  const std::vector<fs::path> parts = part_files(out_dir);
  for (const auto& part : parts) {
    const int fd = open_regular_file(part.string(), false, nullptr);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) finished_parts.emplace_back(part, fd);
    else ::close(fd);
  }
  if (parts.empty()) {  // merged already: nothing to read (a million lines take seconds to parse)
    size_t lines = 0;
    const fs::path manifest = fs::path(out_dir) / "manifest.jsonl";
    for_each_raw_line(manifest, [&](std::string_view, uint64_t, int64_t) { ++lines; });
    std::error_code missing;
    if (!fs::exists(fs::symlink_status(manifest, missing))) write_file_atomic(manifest.string(), "");  // a run made none yet
    if (folded_any) *folded_any = false;
    std::error_code ec;
    fs::remove(fs::path(out_dir) / kPartsDir, ec);  // only if empty
    ::flock(lock, LOCK_UN);
    ::close(lock);
    return lines;
  }
  std::vector<fs::path> files = {fs::path(out_dir) / "manifest.jsonl"};
  files.insert(files.end(), parts.begin(), parts.end());
  const std::vector<LineSpot> spots = last_line_spots(files);
  {
    TempFile out((fs::path(out_dir) / "manifest.jsonl").string());
    std::string text;
    read_back_spots(files, spots, [&](std::string_view line) {
      text += line;
      text += '\n';
      if (text.size() >= (size_t{1} << 22)) out.write(text.data(), text.size()), text.clear();
    });
    out.write(text.data(), text.size());
    out.commit();
  }
  if (folded_any) *folded_any = true;
  for (const auto& [part, fd] : finished_parts) {
    fs::remove(part);
    ::close(fd);
  }
  std::error_code ec;
  fs::remove(fs::path(out_dir) / kPartsDir, ec);  // only if empty
  ::flock(lock, LOCK_UN);
  ::close(lock);
  return spots.size();
}

}  // namespace ditbatch
