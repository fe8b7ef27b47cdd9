// Files that are never half-written: write to a temporary name in the same directory, fsync,
// rename over the final name, fsync the directory. Output folders may be shared with other
// users (a cluster's scratch space) and ditbatch often runs as root: a temporary is created
// exclusively under a name nobody can predict, never through a symbolic link; inputs are read
// only when they are regular files, so a FIFO or a device never blocks or feeds a run forever.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ditbatch {

// A fresh temporary name for `final_path` in its directory (rename stays atomic):
// "<dir>/.<name>.tmp.<pid>.<start>.<pidns>.<random>.<host>", hidden; the writer's pid, its start
// time (/proc, clock ticks since boot), pid namespace and host say whether the writer is still
// running (remove_orphaned_temp_files); the random part makes the name unpredictable. Long
// names are cut to their first 100 bytes in it. Nothing is created.
std::string temp_path_for(const std::string& final_path);

// A temporary file created with O_CREAT | O_EXCL | O_NOFOLLOW (a planted file or symbolic link
// at its name is never written through), registered so that remove_temp_files_now() can remove
// it from a signal handler. Destroyed before commit(): the file is removed. With create false
// only the name is taken, for a library that creates the file exclusively itself (HDF5's
// H5F_ACC_EXCL); fd() is then -1.
class TempFile {
 public:
  explicit TempFile(const std::string& final_path, bool create = true);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  // Writes every byte (throws naming the final path and the reason: "No space left on device").
  void write(const void* data, size_t bytes);
  void close();  // closes the descriptor (HDF5 reopens the file by name)
  // fsync, rename over final_path, fsync the directory.
  void commit();

 private:
  std::string final_path_, path_;
  int fd_ = -1;
  int slot_ = -1;
  bool committed_ = false;
};

// Unlinks every live TempFile's file: async-signal-safe, for a handler about to end the process.
void remove_temp_files_now();

// Temporary files in `dir` that writers which died left behind (kill -9, a node crash). A
// temporary of this host and pid namespace goes at once when its writer is provably gone: its
// pid runs no process, or a process that started at another time. Any other (another host's,
// or one named "<dir>/.<name>.tmp.<pid>" by an older ditbatch) goes once nothing has written
// it for ten minutes (and, for the older names, no process here has its pid): a live writer
// renames its file within seconds or keeps writing it. Only those of `final_name` when given.
// Never follows a symbolic link. Removes them and returns their paths.
std::vector<std::string> remove_orphaned_temp_files(const std::string& dir, const std::string& final_name = "");

// fsync one file (directory: a folder; EINVAL, a file system that cannot, is no error).
void fsync_path(const std::string& path, bool directory);
// fsync a file and the directory that holds it, then rename tmp -> final atomically.
void commit_file(const std::string& tmp_path, const std::string& final_path);
// Writes bytes atomically to path (an exclusive temporary + fsync + rename).
void write_file_atomic(const std::string& path, const std::string& bytes);

// What a path is when it is not a regular file: "a folder", "a FIFO (named pipe)", "a
// character device", ...; "" for a regular file or nothing.
std::string describe_file_type(unsigned mode);
// What is at `path` when a file renamed there would replace something that is not a file:
// "a character device", "a FIFO (named pipe)", "a symbolic link to a folder", ...; "" when
// nothing, a regular file, or a link to one (or to nothing) is there.
std::string non_regular_file(const std::string& path);
// Before any work, that a file a command will write at `path` (given as `option`) can be: throws
// InputError when a folder, FIFO, device or link to one is there, or its folder does not exist.
void check_output_file(const std::string& option, const std::string& path);
// A read-only descriptor of `path` when it is a regular file (opened without blocking: a FIFO
// is refused, not waited on), else -1 with `why` set: "no such file", "a FIFO (named pipe)",
// "a symbolic link" (with follow_links false: inside an output folder nothing is followed).
int open_regular_file(const std::string& path, bool follow_links, std::string* why);

// What a cheap check of a file we wrote compares, read by lstat (no byte of the file is read):
// an edit in place, a truncation, a copy or a file put in its place changes one of them.
struct FileStat {
  int64_t size = 0, mtime_ns = 0;
  uint64_t inode = 0, device = 0;
  bool operator==(const FileStat&) const = default;
};
// The FileStat of `path` when it is a regular file (not followed through a symbolic link).
std::optional<FileStat> stat_regular_file(const std::string& path);

// The most bytes read_file reads (a prompt file of about a million long prompts); a larger
// file is refused with its size, before it is read.
inline constexpr int64_t kMaxInputFileBytes = int64_t{256} << 20;
// The whole of a regular file; throws InputError naming the path when it is missing, is not
// a regular file (a folder, a FIFO, /dev/zero) or holds more than max_bytes. With follow_links
// false, a symbolic link is refused too (inside an output folder nothing is followed).
std::string read_file(const std::string& path, int64_t max_bytes = kMaxInputFileBytes, bool follow_links = true);
bool file_exists(const std::string& path);

// A plain file name inside a folder: not empty, not "." or "..", no '/' and no NUL.
bool is_plain_file_name(const std::string& name);

// A fresh folder "<parent>/<prefix>XXXXXX" (parent "": the system's temporary folder), removed
// with everything in it when the object dies.
class TempFolder {
 public:
  TempFolder(const std::string& parent, const std::string& prefix);
  ~TempFolder();
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// When process `pid` started (clock ticks since boot, field 22 of /proc/PID/stat); 0 when
// /proc cannot say.
uint64_t process_start_time(int pid);

}  // namespace ditbatch
