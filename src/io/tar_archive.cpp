#include "io/tar_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "core/error.h"

namespace ditbatch {

namespace {

constexpr int64_t kTarBlock = 512;

struct EntryDeleter {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};

// The member's header as every archive of ours holds it.
std::unique_ptr<archive_entry, EntryDeleter> member_entry(const std::string& name, int64_t size) {
  std::unique_ptr<archive_entry, EntryDeleter> entry(archive_entry_new());
  archive_entry_set_pathname(entry.get(), name.c_str());
  archive_entry_set_size(entry.get(), size);
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), 0644);
  archive_entry_set_mtime(entry.get(), 0, 0);
  archive_entry_set_uid(entry.get(), 0);
  archive_entry_set_gid(entry.get(), 0);
  return entry;
}

// Whether a 512-byte ustar header is that of a regular file of this name and size, as libarchive
// reads it (the archive is only read, so nothing of it outlives the call).
bool header_is(const std::string& header, const std::string& name, int64_t size) {
  struct archive* a = archive_read_new();
  bool same = false;
  if (a && archive_read_support_format_tar(a) == ARCHIVE_OK &&
      archive_read_open_memory(a, header.data(), header.size()) == ARCHIVE_OK) {
    archive_entry* entry = nullptr;
    same = archive_read_next_header(a, &entry) == ARCHIVE_OK && archive_entry_pathname(entry) &&
           archive_entry_pathname(entry) == name && archive_entry_size(entry) == size &&
           archive_entry_filetype(entry) == AE_IFREG;
  }
  archive_read_free(a);
  return same;
}

bool pread_all(int fd, char* out, int64_t size, int64_t offset) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, out, static_cast<size_t>(size), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out += n, size -= n, offset += n;
  }
  return true;
}

}  // namespace

TarWriter::TarWriter(const std::string& final_path) : final_path_(final_path), file_(final_path) {
  archive_ = archive_write_new();
  if (!archive_) fail("{}: libarchive cannot start an archive", final_path_);
  check(archive_write_set_format_ustar(archive_), "choosing ustar");
  check(archive_write_set_bytes_per_block(archive_, 0), "turning blocking off");  // offsets are what is written
  check(archive_write_open2(archive_, this, nullptr, &TarWriter::write_callback, nullptr, nullptr), "opening");
}

TarWriter::~TarWriter() {
  if (archive_) archive_write_free(archive_);
}

long TarWriter::write_callback(struct archive*, void* self, const void* data, size_t size) {
  auto* w = static_cast<TarWriter*>(self);
  try {
    w->file_.write(data, size);
  } catch (const std::exception& e) {  // never through libarchive's C frames
    w->write_error_ = e.what();
    return -1;
  }
  w->written_ += static_cast<int64_t>(size);
  return static_cast<long>(size);
}

void TarWriter::check(int status, const std::string& what) {
  if (status == ARCHIVE_OK) return;
  if (!write_error_.empty()) fail("{}", write_error_);
  fail("{}: {}: {}", final_path_, what, archive_ ? archive_error_string(archive_) : "no archive");
}

int64_t TarWriter::add(const std::string& name, const std::string& bytes) {
  if (name.empty() || name.size() > 100) fail("{}: member name \"{}\" is not 1..100 bytes", final_path_, name);
  check(archive_write_header(archive_, member_entry(name, static_cast<int64_t>(bytes.size())).get()),
        "writing the header of " + name);
  const int64_t offset = written_;
  const la_ssize_t n = archive_write_data(archive_, bytes.data(), bytes.size());
  if (n != static_cast<la_ssize_t>(bytes.size())) check(ARCHIVE_FATAL, "writing " + name);
  check(archive_write_finish_entry(archive_), "ending " + name);
  return offset;
}

void TarWriter::commit() {
  check(archive_write_close(archive_), "ending the archive");
  archive_write_free(archive_);
  archive_ = nullptr;
  file_.commit();
}

std::optional<std::string> read_tar_member(const std::string& path, int64_t offset, const std::string& name,
                                           int64_t size) {
  if (offset < kTarBlock || offset % kTarBlock != 0 || size < 0 || name.empty() || name.size() > 100)
    return std::nullopt;
  const int fd = open_regular_file(path, false, nullptr);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || offset + size > st.st_size) {  // a listed size is only believed within the file
    ::close(fd);
    return std::nullopt;
  }
  std::string header(kTarBlock, '\0'), data(static_cast<size_t>(size), '\0');
  const bool read = pread_all(fd, header.data(), kTarBlock, offset - kTarBlock) &&
                    pread_all(fd, data.data(), size, offset);
  ::close(fd);
  if (!read || !header_is(header, name, size)) return std::nullopt;
  return data;
}


TarReader::TarReader(const std::string& path) : path_(path) {
  std::string why;
  fd_ = open_regular_file(path, false, &why);
  if (fd_ < 0) fail_input("{}: {}", path, why);
  archive_ = archive_read_new();
  if (!archive_ || archive_read_support_format_tar(archive_) != ARCHIVE_OK ||
      archive_read_open_fd(archive_, fd_, 1 << 20) != ARCHIVE_OK)
    fail_input("{}: not a tar: {}", path, archive_ ? archive_error_string(archive_) : "libarchive");
}

TarReader::~TarReader() {
  if (archive_) archive_read_free(archive_);
  if (fd_ >= 0) ::close(fd_);
}

std::optional<std::string> TarReader::find(const std::string& name, int64_t max_bytes) {
  archive_entry* entry = nullptr;
  for (;;) {
    const int status = archive_read_next_header(archive_, &entry);
    if (status == ARCHIVE_EOF) return std::nullopt;
    if (status != ARCHIVE_OK) fail_input("{}: {}", path_, archive_error_string(archive_));
    if (archive_entry_pathname(entry) == name && archive_entry_filetype(entry) == AE_IFREG) break;
  }
  const int64_t size = archive_entry_size(entry);
  if (size < 0 || size > max_bytes) fail_input("{}: member {} holds {} bytes, more than {}", path_, name, size, max_bytes);
  std::string bytes(static_cast<size_t>(size), '\0');
  if (archive_read_data(archive_, bytes.data(), bytes.size()) != static_cast<la_ssize_t>(size))
    fail_input("{}: member {} cannot be read: {}", path_, name, archive_error_string(archive_));
  return bytes;
}

}  // namespace ditbatch
