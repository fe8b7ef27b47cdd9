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
#include "core/fs.h"

namespace ditbatch {

namespace {

// The mapped files, for the SIGBUS handler: a fault inside one of them means the file shrank
// under the run. Fixed slots, read without locks from the handler.
struct MappedSlot {
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<const char*> message{nullptr};
};
constexpr int kMappedSlots = 64;
MappedSlot g_mapped[kMappedSlots];
struct sigaction g_previous_sigbus {};  // what handled SIGBUS before (Open MPI's backtrace, a sanitizer's)

void write_stderr(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

// A fault in a mapped weight file: say which file and why, remove this process's temporary
// files (an image being written), and exit 1 as any other run-time failure does. The images
// finished so far are complete and their manifest lines were fsynced as each was made. Any
// other SIGBUS goes to the handler that was there before, or ends the process as SIGBUS does.
void on_sigbus(int signal_number, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr);
  for (const MappedSlot& slot : g_mapped) {
    const char* message = slot.message.load();
    if (message && address >= slot.begin.load() && address < slot.end.load()) {
      write_stderr(message);
      remove_temp_files_now();
      ::_exit(1);
    }
  }
  if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
    if (g_previous_sigbus.sa_sigaction) return g_previous_sigbus.sa_sigaction(signal_number, info, context);
  } else if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    return g_previous_sigbus.sa_handler(signal_number);
  }
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

// Registers [data, data + size) of `path` with the handler, which goes in at the first mapping
// (after MPI_Init: Open MPI's own handler is kept for every other fault). Returns the slot, or
// -1 when all are taken (the fault then ends the process as before).
int register_mapping(const char* data, size_t size, const std::string& path) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
  // Every message is kept (the handler may read a slot while it is reused), reachable to the end.
  static std::mutex kept_lock;
  static std::deque<std::string> kept;
  const std::lock_guard<std::mutex> lock(kept_lock);
  for (int i = 0; i < kMappedSlots; ++i) {
    MappedSlot& slot = g_mapped[i];
    if (slot.message.load()) continue;
    const std::string& text = kept.emplace_back(
        "ditbatch: error: " + path + ": the weight file changed under the run (it shrank while its tensors were "
        "read: truncated, or rewritten in place, e.g. by cp over it). The images finished so far are kept and listed in "
        "the manifest; run again to make the rest. Replace a weight file by writing a new one and renaming it over the "
        "old one\n");
    slot.begin.store(reinterpret_cast<uintptr_t>(data));
    slot.end.store(reinterpret_cast<uintptr_t>(data) + size);
    slot.message.store(text.c_str());
    return i;
  }
  return -1;
}

void unregister_mapping(int slot) {
  if (slot < 0) return;
  g_mapped[slot].message.store(nullptr);
  g_mapped[slot].begin.store(0);
  g_mapped[slot].end.store(0);
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
  auto file = std::shared_ptr<MappedFile>(new MappedFile(static_cast<char*>(data), size, path));
  file->sigbus_slot_ = register_mapping(file->data_, size, path);
  return file;
}

MappedFile::~MappedFile() {
  unregister_mapping(sigbus_slot_);
  ::munmap(data_, size_);
}

std::shared_ptr<Buffer> MappedFile::range(uint64_t offset, size_t bytes) {
  DITBATCH_CHECK(holds(offset, bytes), "{}: bytes {}..{} are outside the mapped {} bytes", path_, offset,
                 offset + bytes, size_);
  return std::make_shared<MappedRange>(shared_from_this(), data_ + offset, bytes);
}

}  // namespace ditbatch
