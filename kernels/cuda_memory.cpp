#include "cuda_memory.h"

#include <algorithm>

#include <fmt/format.h>

#include "cuda_check.h"

namespace ditbatch::cuda {

DeviceBlock& DeviceBlock::operator=(DeviceBlock&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = other.owner_;
    ptr_ = other.ptr_;
    bytes_ = other.bytes_;
    other.owner_ = nullptr;
    other.ptr_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void DeviceBlock::reset() {
  if (owner_ && ptr_) owner_->release(ptr_, bytes_);
  owner_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

DeviceAllocator::DeviceAllocator(int device, cudaStream_t stream, bool poison)
    : device_(device), stream_(stream), poison_(poison) {}

DeviceAllocator::~DeviceAllocator() {
  release_cached();
  for (void* slab : slabs_) cudaFree(slab);
}

size_t DeviceAllocator::size_class(size_t bytes) {
  if (bytes <= 4096) return (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  // Eight classes per power of two: at most 12.5 % above the request.
  size_t top = size_t{1} << (63 - __builtin_clzll(static_cast<unsigned long long>(bytes)));
  size_t step = top / 8;
  return (bytes + step - 1) / step * step;
}

void* DeviceAllocator::device_malloc(size_t size, const char* what) {
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, size);
  if (err != cudaSuccess) {
    cudaGetLastError();
    release_cached();  // give the cached blocks back and try once more
    err = cudaMalloc(&ptr, size);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    auto gib = [](size_t b) { return fmt::format("{:.2f} GiB", static_cast<double>(b) / double(1u << 30)); };
    const size_t others = total_bytes - free_bytes > stats_.reserved ? total_bytes - free_bytes - stats_.reserved : 0;
    fail(cat(what, ": out of GPU memory on device ", device_, " allocating ", gib(size), " (", gib(stats_.in_use),
             " in use by ditbatch, ", gib(free_bytes), " of ", gib(total_bytes), " free; about ", gib(others),
             " held by the CUDA context and other processes, see nvidia-smi): ", cudaGetErrorString(err),
             ". A smaller image size, --offload-text-encoder or fewer ranks per GPU need less; `ditbatch inspect` "
             "prints what a weight file needs"));
  }
  ++stats_.device_mallocs;
  stats_.reserved += size;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  return ptr;
}

void* DeviceAllocator::carve(size_t size, const char* what) {
  if (size > slab_left_) {  // the rest of the current slab is abandoned (at most 1 MiB)
    slab_next_ = static_cast<char*>(device_malloc(kSlab, what));
    slabs_.push_back(slab_next_);
    slab_left_ = kSlab;
  }
  void* ptr = slab_next_;
  slab_next_ += size;
  slab_left_ -= size;
  return ptr;
}

void DeviceAllocator::defer(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // not left for the next launch to be blamed for
  if (deferred_.empty())
    deferred_ = cat(call, " failed: CUDA error ", static_cast<int>(err), " (", cudaGetErrorName(err),
                    "): ", cudaGetErrorString(err));
}

void DeviceAllocator::raise_deferred() {
  if (deferred_.empty()) return;
  const std::string message = std::move(deferred_);
  deferred_.clear();
  fail(cat(message, " (an earlier call that could not report it then; rerun with DITBATCH_CUDA_SYNC=1 to see "
                    "which op freed the memory)"));
}

DeviceBlock DeviceAllocator::allocate(size_t bytes, const char* what, bool exact) {
  raise_deferred();
  // Every size is a multiple of 256, so slab-carved blocks stay 256-byte aligned.
  const size_t size = exact ? (std::max<size_t>(bytes, 1) + 511) / 512 * 512 : size_class(bytes);
  void* ptr = nullptr;
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
  } else {
    ptr = size < kSmall ? carve(size, what) : device_malloc(size, what);
  }
  if (exact && size >= kSmall) exact_[ptr] = size;
  ++stats_.allocations;
  stats_.in_use += size;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  if (poison_) check(cudaMemsetAsync(ptr, 0xFF, size, stream_), cat(what, ": poisoning a new allocation"));
  return DeviceBlock(this, ptr, size);
}

void DeviceAllocator::release(void* ptr, size_t bytes) {
  stats_.in_use -= bytes;
  if (auto it = exact_.find(ptr); it != exact_.end()) {  // a weight: back to the device
    exact_.erase(it);
    // queued kernels may still read it
    defer(cudaStreamSynchronize(stream_), "cudaStreamSynchronize before giving a weight back");
    defer(cudaFree(ptr), "cudaFree of a weight");
    stats_.reserved -= bytes;
    return;
  }
  free_[bytes].push_back(ptr);
}

void DeviceAllocator::release_cached() {
  // queued kernels may still use a freed block
  defer(cudaStreamSynchronize(stream_), "cudaStreamSynchronize before giving cached blocks back");
  for (auto& [size, blocks] : free_) {
    if (size < kSmall) continue;  // slab pieces: they stay cached
    for (void* p : blocks) {
      defer(cudaFree(p), "cudaFree of a cached block");
      stats_.reserved -= size;
    }
    blocks.clear();
  }
}

void DeviceAllocator::reset_peaks() {
  stats_.peak_in_use = stats_.in_use;
  stats_.peak_reserved = stats_.reserved;
}

PinnedStaging::PinnedStaging(size_t bytes_per_half) : half_bytes_(bytes_per_half) {
  for (int i = 0; i < 2; ++i) {
    check(cudaHostAlloc(&host_[i], half_bytes_, cudaHostAllocDefault), "pinned staging buffer for uploads");
    check(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming), "pinned staging event");
  }
}

PinnedStaging::~PinnedStaging() {
  for (int i = 0; i < 2; ++i) {
    if (done_[i]) {
      cudaEventSynchronize(done_[i]);
      cudaEventDestroy(done_[i]);
    }
    if (host_[i]) cudaFreeHost(host_[i]);
  }
}

void* PinnedStaging::acquire() {
  check(cudaEventSynchronize(done_[next_]), "upload: waiting for a staging buffer");
  return host_[next_];
}

void PinnedStaging::submitted(cudaStream_t stream) {
  check(cudaEventRecord(done_[next_], stream), "upload: recording a staging event");
  next_ ^= 1;
}

}  // namespace ditbatch::cuda
