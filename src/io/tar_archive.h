// Tar archives of the WebDataset output (--output-format webdataset): POSIX ustar written by
// libarchive, every member a regular file with fixed metadata (mode 0644, owner 0, mtime 0),
// so an archive's bytes depend only on its members' names and contents, never on when or by
// which process it was written. Written to an exclusive temporary beside the final name and
// renamed there when whole (TempFile): a kill leaves no half archive under the final name.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/fs.h"

struct archive;

namespace ditbatch {

class TarWriter {
 public:
  explicit TarWriter(const std::string& final_path);
  ~TarWriter();
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  // Appends a member (a name of at most 100 bytes); returns where its data starts in the archive.
  int64_t add(const std::string& name, const std::string& bytes);
  // Ends the archive, fsyncs it, renames it over the final path and fsyncs the folder.
  void commit();

 private:
  static long write_callback(struct archive*, void* self, const void* data, size_t size);
  void check(int status, const std::string& what);

  std::string final_path_;
  TempFile file_;
  struct archive* archive_ = nullptr;
  int64_t written_ = 0;
  std::string write_error_;  // a failed write inside libarchive's callback, reported by check()
};

// Reads the members of a tar in order (libarchive; never through a symbolic link): to copy
// the images already packed into a tar written again around one image made anew.
class TarReader {
 public:
  explicit TarReader(const std::string& path);  // InputError when it is no tar
  ~TarReader();
  TarReader(const TarReader&) = delete;
  TarReader& operator=(const TarReader&) = delete;
  // The next member of that name after the ones read so far (nullopt at the end): members
  // are found in the order they lie. InputError for a damaged archive or a member too large.
  std::optional<std::string> find(const std::string& name, int64_t max_bytes);

 private:
  std::string path_;
  int fd_ = -1;
  struct archive* archive_ = nullptr;
};

// The bytes of the member `name` of `size` bytes whose data starts at `offset` in the archive
// at `path`, when the header before it is that of a regular file of that name and size;
// nullopt when it is not (another archive, an edit, a truncation) or the file cannot be read.
// Reads only that member (a rerun checks one image of a thousand-image archive).
std::optional<std::string> read_tar_member(const std::string& path, int64_t offset, const std::string& name,
                                           int64_t size);

}  // namespace ditbatch
