// Device memory for the CUDA backend (C++17: included by .cu files).
//
// DeviceAllocator is a caching allocator: sizes are rounded up to size classes (at most 1/8
// waste above 4 KiB), freed blocks go to a per-class free list and are handed out again, so
// once a resolution's working set has been seen the denoising loop makes no cudaMalloc. Blocks
// under 1 MiB (biases, norm gains, small activations) are carved from 32 MiB slabs rather than
// each being a cudaMalloc of its own. All
// work runs on one stream, so a block freed on the host while kernels that use it are still
// queued is safe to hand out again: its next user is queued after them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace ditbatch::cuda {

struct MemoryStats {
  size_t in_use = 0;         // bytes handed out (rounded sizes)
  size_t peak_in_use = 0;
  size_t reserved = 0;       // bytes held from cudaMalloc (in use + cached)
  size_t peak_reserved = 0;
  int64_t device_mallocs = 0;  // cudaMalloc calls so far
  int64_t allocations = 0;     // allocate() calls so far
};

class DeviceAllocator;

// One allocation; returns itself to the allocator when destroyed.
class DeviceBlock {
 public:
  DeviceBlock() = default;
  DeviceBlock(DeviceAllocator* owner, void* ptr, size_t bytes) : owner_(owner), ptr_(ptr), bytes_(bytes) {}
  ~DeviceBlock() { reset(); }
  DeviceBlock(DeviceBlock&& other) noexcept { *this = static_cast<DeviceBlock&&>(other); }
  DeviceBlock& operator=(DeviceBlock&& other) noexcept;
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }  // the rounded size
  void reset();

 private:
  DeviceAllocator* owner_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class DeviceAllocator {
 public:
  // poison: fill every allocation with 0xFF bytes (a NaN in f32 and bf16) so that a kernel
  // that leaves an element unwritten is caught by a finiteness check.
  DeviceAllocator(int device, cudaStream_t stream, bool poison);
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // At least `bytes` (>= 1), 256-byte aligned; what names the caller in out-of-memory errors.
  // exact: round to 512 bytes only, not to a size class (weights: allocated once, never reused);
  // an exact block of 1 MiB or more goes back to the device when freed, not to the cache, so
  // that releasing a model (--offload-text-encoder) makes room for the next one.
  DeviceBlock allocate(size_t bytes, const char* what, bool exact = false);
  void release(void* ptr, size_t bytes);
  // cudaFree every cached (unused) block.
  void release_cached();
  MemoryStats stats() const { return stats_; }
  void reset_peaks();
  // The stream is about to be destroyed (tensors may outlive the backend): use the default one.
  void detach_stream() { stream_ = nullptr; }
  bool poison() const { return poison_; }
  // A failure of a call made where nothing may throw (cudaFree and cudaStreamSynchronize in
  // release(), which destructors call) is kept with the call's name and raised here, at the
  // next checked call (allocate() calls it too): left in CUDA's error state it would be blamed
  // on the next kernel launch (or switch a cuDNN path off).
  void raise_deferred();
  static size_t size_class(size_t bytes);

 private:
  static constexpr size_t kSmall = size_t{1} << 20;  // below this, blocks come from slabs
  static constexpr size_t kSlab = size_t{32} << 20;
  void* carve(size_t size, const char* what);
  void* device_malloc(size_t size, const char* what);
  void defer(cudaError_t err, const char* call);

  int device_;
  cudaStream_t stream_;
  bool poison_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // size -> cached blocks
  std::vector<void*> slabs_;                             // freed only with the allocator
  std::unordered_map<void*, size_t> exact_;              // live exact blocks of >= kSmall bytes
  char* slab_next_ = nullptr;
  size_t slab_left_ = 0;
  MemoryStats stats_;
  std::string deferred_;  // the first failure of a call that could not throw
};

// Page-locked host buffers for uploads: two halves used in turn, each guarded by an event, so
// the host fills one while the other is being copied.
class PinnedStaging {
 public:
  explicit PinnedStaging(size_t bytes_per_half = size_t{32} << 20);
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  size_t half_bytes() const { return half_bytes_; }
  // The next half, after waiting until its previous copy has finished.
  void* acquire();
  // Records on the stream that the copy out of the half last acquired has been queued.
  void submitted(cudaStream_t stream);

 private:
  size_t half_bytes_;
  void* host_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
  int next_ = 0;
};

}  // namespace ditbatch::cuda
