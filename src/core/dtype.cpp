#include "core/dtype.h"

#include <algorithm>

#include "core/error.h"

namespace ditbatch {

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "fp32" || name == "float32" || name == "F32") return DType::F32;
  if (name == "bf16" || name == "bfloat16" || name == "BF16") return DType::BF16;
  if (name == "f16" || name == "fp16" || name == "float16" || name == "F16") return DType::F16;
  if (name == "i32" || name == "int32" || name == "I32") return DType::I32;
  if (name == "i64" || name == "int64" || name == "I64") return DType::I64;
  if (name == "u8" || name == "uint8" || name == "U8") return DType::U8;
  fail_input("unknown dtype '{}' (expected one of f32, bf16, f16, i32, i64, u8)", name);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return bits_f32(sign);
    // subnormal: value = mantissa * 2^-24, exact in fp32
    float v = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exponent == 31) return bits_f32(sign | 0x7f800000u | (mantissa << 13));
  return bits_f32(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // result is subnormal (or zero): round abs / 2^-24 to nearest even integer
    if (abs < 0x33000000u) return sign;  // < 2^-25: rounds to zero
    uint32_t exponent = abs >> 23;
    uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exponent;  // bits to drop so that the unit is 2^-24
    uint32_t value = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (value & 1u))) ++value;
    return static_cast<uint16_t>(sign | value);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even at bit 13
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

namespace {

// 16-bit values at any address: a safetensors data section starts at 8 + header length, so a
// bf16 tensor in a mapped file may sit at an odd address (a uint16_t* there is undefined
// behaviour). memcpy compiles to a plain load or store.
uint16_t load_u16(const void* base, size_t i) {
  uint16_t v;
  std::memcpy(&v, static_cast<const char*>(base) + 2 * i, 2);
  return v;
}

void store_u16(void* base, size_t i, uint16_t v) { std::memcpy(static_cast<char*>(base) + 2 * i, &v, 2); }

}  // namespace

void convert_to_f32(const void* src, DType src_type, float* dst, size_t n) {
  switch (src_type) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::BF16: {
      // A weight load converts every bf16 tensor once: on all threads (the loop vectorises).
      const int64_t count = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (count >= (int64_t{1} << 20))
      for (int64_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(load_u16(src, static_cast<size_t>(i)));
      return;
    }
    case DType::F16:
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(src, i));
      return;
    default: fail("convert_to_f32: {} is not a float type", dtype_name(src_type));
  }
}

void convert_from_f32(const float* src, void* dst, DType dst_type, size_t n) {
  switch (dst_type) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) store_u16(dst, i, f32_to_bf16(src[i]));
      return;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) store_u16(dst, i, f32_to_f16(src[i]));
      return;
    default: fail("convert_from_f32: {} is not a float type", dtype_name(dst_type));
  }
}

void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  if (src_type == dst_type) {  // any type, integers too
    std::memcpy(dst, src, n * dtype_size(src_type));
  } else if (src_type == DType::F32) {
    convert_from_f32(static_cast<const float*>(src), dst, dst_type, n);
  } else if (dst_type == DType::F32) {
    convert_to_f32(src, src_type, static_cast<float*>(dst), n);
  } else {  // between two 16-bit types: through f32, a block at a time
    constexpr size_t kBlock = 4096;
    float tmp[kBlock];
    const size_t ss = dtype_size(src_type), ds = dtype_size(dst_type);
    for (size_t i0 = 0; i0 < n; i0 += kBlock) {
      const size_t count = std::min(kBlock, n - i0);
      convert_to_f32(static_cast<const char*>(src) + i0 * ss, src_type, tmp, count);
      convert_from_f32(tmp, static_cast<char*>(dst) + i0 * ds, dst_type, count);
    }
  }
}

namespace {

template <typename Bits>
int64_t first_with_exponent_all_set(const void* data, size_t n, Bits exponent) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    Bits v;
    std::memcpy(&v, bytes + i * sizeof(Bits), sizeof(Bits));  // (any alignment)
    if ((v & exponent) == exponent) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace

int64_t first_non_finite(const void* data, DType type, size_t n) {
  switch (type) {
    case DType::F32: return first_with_exponent_all_set<uint32_t>(data, n, 0x7F800000u);
    case DType::BF16: return first_with_exponent_all_set<uint16_t>(data, n, 0x7F80u);
    case DType::F16: return first_with_exponent_all_set<uint16_t>(data, n, 0x7C00u);
    default: return -1;
  }
}

}  // namespace ditbatch
