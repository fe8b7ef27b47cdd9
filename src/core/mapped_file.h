// A file mapped into memory, privately, so that its bytes are used where the page cache holds
// them: a tensor viewing the mapping needs neither a copy nor fresh process pages, whose first
// touch (the kernel clearing them) costs more than reading the file. A write through a view
// stays the process's own (copy on write), so code that patches a weight in place is safe.
//
// The file must not shrink while it is mapped (a view of bytes past the new end would raise
// SIGBUS): the first mapping installs a SIGBUS handler that, for a fault inside a mapped file,
// names the file, removes the process's temporary files and exits 1 (the images made so far are
// complete and listed); any other SIGBUS goes to the handler that was there before. A file
// replaced by rename (what ditbatch's own writers do) is no hazard: the mapping keeps the old
// file's pages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace ditbatch {

class MappedFile : public std::enable_shared_from_this<MappedFile> {
 public:
  // Maps all of the open file `fd` (not taken over: the caller keeps and closes it); nullptr
  // when it cannot be mapped (an empty file, a file system without mmap), where the caller
  // reads instead. `path` is for messages.
  static std::shared_ptr<MappedFile> map(int fd, const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  size_t size() const { return size_; }
  // Whether [offset, offset + bytes) lies inside the mapped file.
  bool holds(uint64_t offset, size_t bytes) const { return offset <= size_ && bytes <= size_ - offset; }
  // A host buffer of those bytes (holds() must be true). The pages it alone covers are let go
  // (MADV_DONTNEED) when the last tensor viewing it goes: a weight uploaded to a GPU stops
  // counting in the process's memory.
  std::shared_ptr<Buffer> range(uint64_t offset, size_t bytes);

 private:
  MappedFile(char* data, size_t size, std::string path) : data_(data), size_(size), path_(std::move(path)) {}
  char* data_;
  size_t size_;
  std::string path_;
  int sigbus_slot_ = -1;  // its entry in the SIGBUS handler's table
};

}  // namespace ditbatch
