#include "core/fs.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/error.h"

namespace ditbatch {
namespace fs = std::filesystem;

namespace {

// The first `max_bytes` of a name, cut where a UTF-8 character starts.
std::string cut_name(const std::string& name, size_t max_bytes = 100) {
  if (name.size() <= max_bytes) return name;
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(name[end]) & 0xC0) == 0x80) --end;
  return name.substr(0, end);
}

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string out;
  for (const char* p = host; *p && out.size() < 64; ++p)
    out += (std::isalnum(static_cast<unsigned char>(*p)) || *p == '-' || *p == '.') ? *p : '_';
  return out.empty() ? "unknown" : out;
}

uint64_t pid_namespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

std::string random_hex() {
  unsigned char bytes[4] = {};
  if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
    // No entropy source: the clock still varies; O_EXCL keeps the file safe either way.
    const auto t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    std::memcpy(bytes, &t, sizeof bytes);
  }
  return fmt::format("{:02x}{:02x}{:02x}{:02x}", bytes[0], bytes[1], bytes[2], bytes[3]);
}

bool all_digits(const std::string& s, size_t max_digits) {
  return !s.empty() && s.size() <= max_digits && s.find_first_not_of("0123456789") == std::string::npos;
}

// What a temporary's name says about its writer.
struct TempName {
  std::string final_name;  // cut as in temp_path_for
  pid_t pid = 0;
  bool with_identity = false;  // this version's names: start time, pid namespace, host
  uint64_t start = 0, pid_namespace = 0;
  std::string host;
};

std::optional<TempName> parse_temp_name(const std::string& name) {
  if (name.size() < 7 || name[0] != '.') return std::nullopt;
  // The last ".tmp." whose tail parses: a final name (or a host) may hold ".tmp." itself.
  for (size_t at = name.rfind(".tmp."); at != std::string::npos && at > 1; at = name.rfind(".tmp.", at - 1)) {
    TempName t;
    t.final_name = name.substr(1, at - 1);
    const std::string tail = name.substr(at + 5);
    if (all_digits(tail, 9)) {  // ".<name>.tmp.<pid>" of an older ditbatch
      t.pid = static_cast<pid_t>(std::stol(tail));
      return t;
    }
    // "<pid>.<start>.<pidns>.<random>.<host>"
    std::vector<std::string> parts;
    size_t from = 0;
    for (int i = 0; i < 4; ++i) {
      const size_t dot = tail.find('.', from);
      if (dot == std::string::npos) break;
      parts.push_back(tail.substr(from, dot - from));
      from = dot + 1;
    }
    if (parts.size() != 4 || from >= tail.size() || !all_digits(parts[0], 9) || !all_digits(parts[1], 20) ||
        !all_digits(parts[2], 20) || parts[3].size() != 8 ||
        parts[3].find_first_not_of("0123456789abcdef") != std::string::npos)
      continue;
    t.pid = static_cast<pid_t>(std::stol(parts[0]));
    t.with_identity = true;
    t.start = std::stoull(parts[1]);
    t.pid_namespace = std::stoull(parts[2]);
    t.host = tail.substr(from);
    return t;
  }
  return std::nullopt;
}

bool pid_runs(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// ---- temporaries a signal handler may remove ----------------------------------------------------

// A handler may only read what is fixed before it runs: plain buffers behind lock-free flags.
constexpr int kTempSlots = 8;
struct TempSlot {
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 holds a path
  char path[4096];
};
TempSlot g_temp_slots[kTempSlots];
static_assert(std::atomic<int>::is_always_lock_free);

}  // namespace

void fsync_path(const std::string& path, bool directory) {
  // O_NONBLOCK | O_NOFOLLOW: whatever sits at a name inside a shared folder, nothing blocks and
  // no link is followed.
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                                                : (O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (fd < 0) fail("{}: cannot open to fsync: {}", path, std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && !(directory && err == EINVAL)) fail("{}: fsync failed: {}", path, std::strerror(err));
}

namespace {

// rename tmp -> final (a link or file at final is replaced, never followed), fsync the folder.
void rename_into_place(const std::string& tmp_path, const std::string& final_path) {
  // A rename replaces whatever is at the name: a device node (as root, /dev/null), a FIFO or a
  // socket is never replaced by a file, whichever command writes it.
  if (const std::string what = non_regular_file(final_path); !what.empty()) {
    std::remove(tmp_path.c_str());
    fail_input("{}: is {}, not a file; ditbatch writes only regular files: name another path", final_path, what);
  }
  if (std::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp_path.c_str());
    fail("cannot rename {} to {}: {}", tmp_path, final_path, std::strerror(err));
  }
  const fs::path dir = fs::path(final_path).parent_path();
  fsync_path(dir.empty() ? "." : dir.string(), true);
}

}  // namespace

uint64_t process_start_time(int pid) {
  // Field 22 of /proc/PID/stat; the command name (field 2) may hold spaces and parentheses.
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  size_t at = close + 2;
  for (int field = 3; field < 22 && at < stat.size(); ++field) {
    at = stat.find(' ', at);
    if (at == std::string::npos) return 0;
    ++at;
  }
  return std::strtoull(stat.c_str() + at, nullptr, 10);
}

std::string temp_path_for(const std::string& final_path) {
  static const uint64_t start = process_start_time(::getpid());
  static const uint64_t pidns = pid_namespace();
  static const std::string host = host_name();
  const fs::path p(final_path);
  const fs::path dir = p.parent_path();
  const std::string name = fmt::format(".{}.tmp.{}.{}.{}.{}.{}", cut_name(p.filename().string()), ::getpid(), start,
                                       pidns, random_hex(), host);
  return (dir.empty() ? fs::path(name) : dir / name).string();
}

namespace {

int register_temp_file(const std::string& path) {
  if (path.size() >= sizeof g_temp_slots[0].path) return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    int expected = 0;
    if (!g_temp_slots[i].state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(g_temp_slots[i].path, path.c_str(), path.size() + 1);
    g_temp_slots[i].state.store(2);
    return i;
  }
  return -1;
}

void unregister_temp_file(int slot) {
  if (slot >= 0 && slot < kTempSlots) g_temp_slots[slot].state.store(0);
}

}  // namespace

void remove_temp_files_now() {
  for (TempSlot& slot : g_temp_slots)
    if (slot.state.load() == 2) ::unlink(slot.path);  // async-signal-safe
}

TempFile::TempFile(const std::string& final_path, bool create) : final_path_(final_path) {
  if (!create) {  // HDF5 creates it (H5F_ACC_EXCL, which is O_CREAT | O_EXCL too)
    path_ = temp_path_for(final_path);
    slot_ = register_temp_file(path_);
    return;
  }
  for (int attempt = 0; attempt < 8 && fd_ < 0; ++attempt) {
    path_ = temp_path_for(final_path);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) fail_input("{}: cannot create: {}", path_, std::strerror(errno));
  }
  if (fd_ < 0) fail("{}: every temporary name tried is taken", final_path);
  slot_ = register_temp_file(path_);
}

TempFile::~TempFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(path_.c_str());
  unregister_temp_file(slot_);
}

void TempFile::write(const void* data, size_t bytes) {
  DITBATCH_CHECK(fd_ >= 0, "TempFile::write after close: {}", path_);
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("{}: write failed: {}", final_path_, n < 0 ? std::strerror(errno) : "nothing written");
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void TempFile::close() {
  if (fd_ >= 0 && ::close(fd_) != 0) {
    fd_ = -1;
    fail("{}: close failed: {}", final_path_, std::strerror(errno));
  }
  fd_ = -1;
}

void TempFile::commit() {
  if (fd_ >= 0) {
    if (::fsync(fd_) != 0) fail("{}: fsync failed: {}", final_path_, std::strerror(errno));
    close();
  } else {
    fsync_path(path_, false);
  }
  rename_into_place(path_, final_path_);
  committed_ = true;
}

std::vector<std::string> remove_orphaned_temp_files(const std::string& dir, const std::string& final_name) {
  const auto cutoff = fs::file_time_type::clock::now() - std::chrono::minutes(10);
  static const uint64_t own_pidns = pid_namespace();
  static const std::string own_host = host_name();
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir.empty() ? "." : dir, ec)) {
    const auto temp = parse_temp_name(e.path().filename().string());
    if (!temp || (!final_name.empty() && temp->final_name != cut_name(final_name)) ||
        !fs::is_regular_file(e.symlink_status(ec)))  // a link is no temporary of ours: never followed
      continue;
    bool orphaned = false;
    if (temp->with_identity && temp->host == own_host && temp->pid_namespace == own_pidns) {
      // Provably gone: no process has the pid, or the one that has it started at another time
      // (where /proc hides other users' processes nothing is proven, and the file stays).
      const uint64_t started = pid_runs(temp->pid) ? process_start_time(temp->pid) : 0;
      orphaned = !pid_runs(temp->pid) || (started != 0 && temp->start != 0 && started != temp->start);
    } else {
      const bool unwritten = e.last_write_time(ec) < cutoff && !ec;
      orphaned = unwritten && (temp->with_identity || (!pid_runs(temp->pid) && temp->pid != ::getpid()));
    }
    if (orphaned && fs::remove(e.path(), ec)) removed.push_back(e.path().string());
  }
  return removed;
}

void commit_file(const std::string& tmp_path, const std::string& final_path) {
  fsync_path(tmp_path, false);
  rename_into_place(tmp_path, final_path);
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  TempFile tmp(path);
  tmp.write(bytes.data(), bytes.size());
  tmp.commit();
}

std::string describe_file_type(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "";
    case S_IFDIR: return "a folder";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
  }
  return "not a regular file";
}

std::string non_regular_file(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  if (!S_ISLNK(st.st_mode)) return describe_file_type(st.st_mode);
  struct stat target {};
  if (::stat(path.c_str(), &target) != 0 || S_ISREG(target.st_mode)) return "";
  return "a symbolic link to " + describe_file_type(target.st_mode);
}

void check_output_file(const std::string& option, const std::string& path) {
  if (const std::string what = non_regular_file(path); !what.empty())
    fail_input("{} {}: is {}, not a file; ditbatch writes only regular files: name another path", option, path, what);
  const fs::path dir = fs::path(path).parent_path();
  struct stat st {};
  if (!dir.empty() && (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)))
    fail_input("{} {}: the folder {} does not exist", option, path, dir.string());
}

int open_regular_file(const std::string& path, bool follow_links, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow_links ? 0 : O_NOFOLLOW));
  if (fd < 0) {
    const int err = errno;
    struct stat st {};
    if (why) {
      if (err == ENOENT) *why = "no such file";
      else if (!follow_links && (err == ELOOP || err == EMLINK) && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
        *why = "a symbolic link";
      else if (err == ENXIO && ::stat(path.c_str(), &st) == 0) *why = describe_file_type(st.st_mode);  // a socket
      else *why = fmt::format("cannot open: {}", std::strerror(err));
    }
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (why) *why = describe_file_type(st.st_mode);
    ::close(fd);
    return -1;
  }
  // Reads of a regular file never block anyway; the flag only mattered for the open.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string read_file(const std::string& path, int64_t max_bytes, bool follow_links) {
  std::string why;
  const int fd = open_regular_file(path, follow_links, &why);
  if (fd < 0) {
    if (why == "no such file" || why.starts_with("cannot open")) fail_input("{}: {}", path, why);
    fail_input("{}: is {}, not a file", path, why);
  }
  struct stat st {};
  ::fstat(fd, &st);
  auto too_large = [&](int64_t bytes) {
    ::close(fd);
    fail_input("{}: {} bytes, more than the {} MiB an input file may hold", path, bytes, max_bytes >> 20);
  };
  if (st.st_size > max_bytes) too_large(st.st_size);
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t have = 0;
  for (;;) {  // up to the size fstat gave, and whatever was appended since
    if (have == bytes.size()) bytes.resize(std::min<size_t>(bytes.size() + (1 << 16), static_cast<size_t>(max_bytes) + 1));
    if (have == bytes.size()) too_large(static_cast<int64_t>(have));
    const ssize_t n = ::read(fd, bytes.data() + have, bytes.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail_input("{}: read error: {}", path, std::strerror(err));
    }
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  ::close(fd);
  bytes.resize(have);
  return bytes;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::optional<FileStat> stat_regular_file(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return FileStat{static_cast<int64_t>(st.st_size),
                  static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + static_cast<int64_t>(st.st_mtim.tv_nsec),
                  static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_dev)};
}

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

TempFolder::TempFolder(const std::string& parent, const std::string& prefix) {
  std::string tmpl =
      (parent.empty() ? std::filesystem::temp_directory_path().string() : parent) + "/" + prefix + "XXXXXX";
  if (!mkdtemp(tmpl.data())) fail("cannot make a temporary folder under {}: {}", parent, std::strerror(errno));
  path_ = tmpl;
}

TempFolder::~TempFolder() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace ditbatch
