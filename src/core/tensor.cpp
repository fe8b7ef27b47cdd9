#include "core/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace ditbatch {

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

HostBuffer::HostBuffer(size_t bytes) : bytes_(bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!data_) fail("out of host memory allocating {} bytes", bytes);
}

HostBuffer::~HostBuffer() { std::free(data_); }

Tensor::Tensor(std::shared_ptr<Buffer> buffer, size_t byte_offset, Shape shape, DType dtype)
    : buffer_(std::move(buffer)), offset_(byte_offset), shape_(std::move(shape)), dtype_(dtype) {
  for (int64_t d : shape_) DITBATCH_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape_));
  DITBATCH_CHECK(!buffer_ || offset_ + nbytes() <= buffer_->bytes(),
                 "tensor {} at offset {} does not fit its buffer of {} bytes", describe(), offset_,
                 buffer_->bytes());
}

Tensor Tensor::host(Shape shape, DType dtype) {
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(std::make_shared<HostBuffer>(bytes), 0, std::move(shape), dtype);
}

Tensor ReusedHostBuffer::take(const Shape& shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  if (!buffer_ || buffer_.use_count() > 1 || buffer_->bytes() < bytes)
    buffer_ = std::make_shared<HostBuffer>(bytes);
  return Tensor(buffer_, 0, shape, dtype);
}

Tensor Tensor::host_f32(Shape shape, const std::vector<float>& values) {
  Tensor t = host(std::move(shape), DType::F32);
  DITBATCH_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "host_f32: {} values for shape {}",
                 values.size(), shape_str(t.shape()));
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  return t;
}

int64_t Tensor::dim(int64_t i) const {
  int64_t r = rank();
  if (i < 0) i += r;
  DITBATCH_CHECK(i >= 0 && i < r, "dim {} of tensor {}", i, describe());
  return shape_[static_cast<size_t>(i)];
}

void* Tensor::raw() const {
  DITBATCH_CHECK(buffer_ != nullptr, "access to an undefined tensor");
  return static_cast<char*>(buffer_->data()) + offset_;
}

Tensor Tensor::view(Shape shape) const {
  DITBATCH_CHECK(shape_numel(shape) == numel(), "cannot view {} as {}", describe(), shape_str(shape));
  return Tensor(buffer_, offset_, std::move(shape), dtype_);
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  DITBATCH_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
                 "slice0({}, {}) of {}", begin, end, describe());
  Shape shape = shape_;
  shape[0] = end - begin;
  size_t row_bytes = static_cast<size_t>(shape_numel(Shape(shape_.begin() + 1, shape_.end()))) *
                     dtype_size(dtype_);
  return Tensor(buffer_, offset_ + static_cast<size_t>(begin) * row_bytes, std::move(shape), dtype_);
}

std::string Tensor::describe() const {
  return fmt::format("{}{}", dtype_name(dtype_), shape_str(shape_));
}

Tensor Tensor::to_f32() const {
  DITBATCH_CHECK(device() == Device::Host, "to_f32 of a device tensor {}", describe());
  Tensor out = host(shape_, DType::F32);
  float* dst = out.data<float>();
  const size_t n = static_cast<size_t>(numel());
  switch (dtype_) {  // integers: exact up to 2^24 (ids, pixel values)
    case DType::I32: std::copy(data<int32_t>(), data<int32_t>() + n, dst); break;
    case DType::I64: std::copy(data<int64_t>(), data<int64_t>() + n, dst); break;
    case DType::U8: std::copy(data<uint8_t>(), data<uint8_t>() + n, dst); break;
    default: convert_to_f32(raw(), dtype_, dst, n);
  }
  return out;
}

Tensor Tensor::clone() const {
  DITBATCH_CHECK(device() == Device::Host, "clone of a device tensor {}", describe());
  Tensor out = host(shape_, dtype_);
  std::memcpy(out.raw(), raw(), nbytes());
  return out;
}

}  // namespace ditbatch
