// Element types and the exact conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ditbatch {

enum class DType : uint8_t { F32, BF16, F16, I32, I64, U8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
  }
  return "?";
}

constexpr bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// Parses "f32", "bf16", "f16", "i32", "i64", "u8" (and the safetensors spellings); throws on others.
DType parse_dtype(std::string_view name);

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// fp32 -> bf16 with round-to-nearest-even; NaN stays a (quiet) NaN with its sign.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}
inline float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

// IEEE binary16 <-> fp32, exact (fp32 -> f16 rounds to nearest even, overflow to inf).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of a float type to fp32 (src may alias nothing in dst).
void convert_to_f32(const void* src, DType src_type, float* dst, size_t n);
// Converts n fp32 values into a float type.
void convert_from_f32(const float* src, void* dst, DType dst_type, size_t n);
// n values between any two float types, or a copy between equal types (any type); one pass
// except between two 16-bit float types (through f32, a block at a time).
void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

// The first of n values of a float type that is NaN or infinite (its exponent bits all set),
// or -1; -1 for any other type.
int64_t first_non_finite(const void* data, DType type, size_t n);

}  // namespace ditbatch
