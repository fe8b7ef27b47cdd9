// Tensor: a shape, an element type and a view into a buffer that lives on the host or a device.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ditbatch {

enum class Device : uint8_t { Host, Cuda };

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);  // "[2, 16, 64]"
int64_t shape_numel(const Shape& shape);

// A block of memory owned by whoever allocated it (host heap, a CUDA pool, ...).
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;
  virtual Device device() const = 0;
};

// A 64-byte aligned host allocation.
class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(size_t bytes);
  ~HostBuffer() override;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* data() override { return data_; }
  size_t bytes() const override { return bytes_; }
  Device device() const override { return Device::Host; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Tensors are always dense row-major; views share the buffer (reshape, a range of rows).
class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Buffer> buffer, size_t byte_offset, Shape shape, DType dtype);

  // A new host tensor; contents uninitialised.
  static Tensor host(Shape shape, DType dtype = DType::F32);
  // A new host fp32 tensor holding a copy of values (numel must match).
  static Tensor host_f32(Shape shape, const std::vector<float>& values);

  bool defined() const { return buffer_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const;  // negative i counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const { return buffer_ ? buffer_->device() : Device::Host; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  // Bytes of the buffer past this view's end (a view of leading rows has the rest after it).
  size_t bytes_after() const { return buffer_ ? buffer_->bytes() - offset_ - nbytes() : 0; }
  // Rows = product of all dims but the last; cols = the last dim. The view every row op uses.
  int64_t rows() const {  // the leading dims' product (not numel / cols: cols may be 0)
    int64_t r = 1;
    for (size_t i = 0; i + 1 < shape_.size(); ++i) r *= shape_[i];
    return r;
  }
  int64_t cols() const { return shape_.empty() ? 1 : shape_.back(); }

  void* raw() const;
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw());
  }

  // The same elements with another shape (numel must agree).
  Tensor view(Shape shape) const;
  // Elements [begin, end) along dim 0.
  Tensor slice0(int64_t begin, int64_t end) const;
  std::string describe() const;  // "f32[2, 16, 64]"

  // Host tensors only: an fp32 copy (converting bf16/f16 and integers), and a deep copy.
  Tensor to_f32() const;
  Tensor clone() const;

 private:
  std::shared_ptr<Buffer> buffer_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
};

// One host buffer handed out again and again for short-lived tensors (a weight on its way to
// the backend, which converts or copies it at once): memory faulted in once, not per tensor.
// A tensor still alive from the last take() is never overwritten: its buffer is left to it and
// a new one is made.
class ReusedHostBuffer {
 public:
  Tensor take(const Shape& shape, DType dtype);

 private:
  std::shared_ptr<HostBuffer> buffer_;
};

}  // namespace ditbatch
