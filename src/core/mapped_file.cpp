#include "core/mapped_file.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>

#include "core/error.h"

namespace ditbatch {

namespace {

// What the SIGBUS handler writes: set before the handler can run, never freed.
std::atomic<const char*> g_sigbus_message{nullptr};

void on_sigbus(int signal_number) {
  if (const char* message = g_sigbus_message.load()) {
    ssize_t ignored = ::write(STDERR_FILENO, message, std::strlen(message));
    (void)ignored;
  }
  ::signal(signal_number, SIG_DFL);  // then end as the signal would have: status says SIGBUS
  ::raise(signal_number);
}

// Names the newest mapped file in the message; the handler goes in once, and only where
// nobody else (a sanitizer, a debugger's runtime) handles SIGBUS already.
void name_mapped_file_on_sigbus(const std::string& path) {
  const std::string text = "ditbatch: SIGBUS reading a memory-mapped file (the newest mapped is " + path +
                           "): it shrank or became unreadable while in use. Do not truncate or rewrite a weight file "
                           "in place while a run reads it (write a new file and rename it over the old one)\n";
  // Every message is kept (a handler may be reading an older one), reachable to the end.
  static std::mutex kept_lock;
  static std::deque<std::string> kept;
  const std::lock_guard<std::mutex> lock(kept_lock);
  g_sigbus_message.store(kept.emplace_back(text).c_str());
  static const bool installed = [] {
    struct sigaction current {};
    if (sigaction(SIGBUS, nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
        (current.sa_flags & SA_SIGINFO) != 0)
      return false;
    struct sigaction action {};
    action.sa_handler = on_sigbus;
    sigemptyset(&action.sa_mask);
    return sigaction(SIGBUS, &action, nullptr) == 0;
  }();
  (void)installed;
}

size_t page_size() {
  static const size_t size = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

// A range of a mapping, held by the tensors that view it (and they hold the mapping).
class MappedRange final : public Buffer {
 public:
  MappedRange(std::shared_ptr<MappedFile> file, char* data, size_t bytes)
      : file_(std::move(file)), data_(data), bytes_(bytes) {}
  ~MappedRange() override {
    // Only the pages inside the range: a page at either end may hold a neighbour's bytes.
    const auto first = (reinterpret_cast<uintptr_t>(data_) + page_size() - 1) / page_size() * page_size();
    const auto end = (reinterpret_cast<uintptr_t>(data_) + bytes_) / page_size() * page_size();
    if (end > first) ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
  }
  void* data() override { return data_; }
  size_t bytes() const override { return bytes_; }
  Device device() const override { return Device::Host; }

 private:
  std::shared_ptr<MappedFile> file_;
  char* data_;
  size_t bytes_;
};

}  // namespace

std::shared_ptr<MappedFile> MappedFile::map(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) return nullptr;
  const auto size = static_cast<size_t>(st.st_size);
  // Writable but private: a write copies the page for this process and never reaches the file.
  // No swap reserved for those copies (there are none unless a weight is patched in place): a
  // node that counts every private page up front (vm.overcommit_memory 2) or an address-space
  // limit may still refuse the mapping, and then the caller reads.
  void* data = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
  if (data == MAP_FAILED) return nullptr;
  name_mapped_file_on_sigbus(path);
  return std::shared_ptr<MappedFile>(new MappedFile(static_cast<char*>(data), size, path));
}

MappedFile::~MappedFile() { ::munmap(data_, size_); }

std::shared_ptr<Buffer> MappedFile::range(uint64_t offset, size_t bytes) {
  DITBATCH_CHECK(holds(offset, bytes), "{}: bytes {}..{} are outside the mapped {} bytes", path_, offset,
                 offset + bytes, size_);
  return std::make_shared<MappedRange>(shared_from_this(), data_ + offset, bytes);
}

}  // namespace ditbatch
