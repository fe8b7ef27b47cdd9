// fp32 <-> bf16 / f16 conversions against hand-computed bit patterns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"

using namespace ditbatch;

TEST(DType, Bf16RoundsToNearestEven) {
  // 1.0 + 2^-8 is exactly halfway between bf16 1.0 (0x3f80) and 1.0078125 (0x3f81): ties to even.
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808000u)), 0x3f80);
  // 1.0078125 + 2^-8 is halfway between 0x3f81 (odd) and 0x3f82 (even): rounds up.
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f818000u)), 0x3f82);
  // Just above halfway rounds up, just below rounds down.
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f807fffu)), 0x3f80);
  // Negative numbers mirror: -1 - 2^-8 ties to even.
  EXPECT_EQ(f32_to_bf16(bits_f32(0xbf808000u)), 0xbf80);
  // Carry into the exponent: the largest mantissa rounds up to the next power of two.
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3fffffffu)), 0x4000);
  // Overflow to infinity: max float rounds up.
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  // pi = 0x40490fdb -> 0x4049 (the dropped 0x0fdb is below half)
  EXPECT_EQ(f32_to_bf16(3.14159265f), 0x4049);
  // NaN stays NaN (quiet), including a NaN whose payload sits only in the low bits.
  uint16_t nan = f32_to_bf16(bits_f32(0x7f800001u));
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x007f, 0);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc049), -3.140625f);
}

TEST(DType, F16ExactAndRounded) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);          // max half
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);          // below the rounding boundary
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);          // ties to even -> inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // halfway to it: ties to even (0)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0)
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(f16_to_f32(0xfc00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  // Every finite half survives a round trip through fp32.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(DType, ConvertBetweenAnyPair) {
  // Hand-picked bit patterns: bf16 -> f16 goes through f32 (exact) and rounds once into f16.
  // bf16 0x3f81 = 1.0078125 is exact in f16 (0x3c08); bf16 0x4049 = 3.140625 -> f16 0x4248;
  // bf16 0x477f = 65280 fits f16 max (0x7bf8); bf16 0x4780 = 65536 overflows to inf (0x7c00).
  // 5000 values: more than one of convert()'s blocks.
  const uint16_t bf[4] = {0x3f81, 0x4049, 0x477f, 0x4780}, f16[4] = {0x3c08, 0x4248, 0x7bf8, 0x7c00};
  std::vector<uint16_t> src(5000), dst(5000, 0xffff);
  for (size_t i = 0; i < src.size(); ++i) src[i] = bf[i % 4];
  convert(src.data(), DType::BF16, dst.data(), DType::F16, src.size());
  for (size_t i = 0; i < dst.size(); ++i) ASSERT_EQ(dst[i], f16[i % 4]) << i;
  // f32 -> bf16 rounds to nearest even, bf16 -> f32 is exact.
  const float f[3] = {bits_f32(0x3f808000u), bits_f32(0x3f818000u), 3.14159265f};
  uint16_t b[3];
  convert(f, DType::F32, b, DType::BF16, 3);
  EXPECT_EQ(b[0], 0x3f80);
  EXPECT_EQ(b[1], 0x3f82);
  EXPECT_EQ(b[2], 0x4049);
  float back[3];
  convert(b, DType::BF16, back, DType::F32, 3);
  EXPECT_EQ(back[2], 3.140625f);
  // Equal types copy, integers included (token ids travel this way).
  const int64_t ids[3] = {-3, 151643, 1LL << 40};
  int64_t ids_out[3] = {};
  convert(ids, DType::I64, ids_out, DType::I64, 3);
  EXPECT_EQ(ids_out[1], 151643);
  EXPECT_EQ(ids_out[2], 1LL << 40);
}

// A safetensors data section starts at 8 + header length, so a bf16 or f16 tensor of a mapped
// file can sit at an odd address: the conversions read and write 16-bit values at any address
// (UBSan reported the misaligned uint16_t loads of convert's bf16 input).
TEST(DType, SixteenBitValuesAtAnOddAddress) {
  // Little-endian bit patterns: bf16 1.0 = 0x3f80, -2.5 = 0xc020; f16 1.0 = 0x3c00, 0.5 = 0x3800.
  const unsigned char bf16[] = {0x00, 0x80, 0x3f, 0x20, 0xc0};
  const unsigned char f16[] = {0x00, 0x00, 0x3c, 0x00, 0x38};
  float out[2];
  convert_to_f32(bf16 + 1, DType::BF16, out, 2);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.5f);
  convert_to_f32(f16 + 1, DType::F16, out, 2);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 0.5f);
  unsigned char written[5] = {0xaa, 0, 0, 0, 0};
  const float values[] = {1.0f, -2.5f};
  convert_from_f32(values, written + 1, DType::BF16, 2);
  const std::vector<unsigned char> expected = {0xaa, 0x80, 0x3f, 0x20, 0xc0};  // the byte before is untouched
  EXPECT_EQ(std::vector<unsigned char>(written, written + 5), expected);
}

// The largest finite value of each type is finite; NaN (quiet or signalling, either sign) and
// both infinities are found where they are, at any alignment.
TEST(DType, FirstNonFiniteFindsNanAndInfOfEachType) {
  const uint16_t f16_max = 0x7BFF, f16_inf = 0x7C00, f16_nan = 0xFE01;
  const uint16_t bf16_max = 0x7F7F, bf16_inf = 0xFF80, bf16_nan = 0x7F81;
  std::vector<uint16_t> f16 = {0, f16_max, 0xFBFF, 0x0001, f16_inf, f16_nan};
  std::vector<uint16_t> bf16 = {0, bf16_max, 0xFF7F, 0x0001, bf16_nan, bf16_inf};
  EXPECT_EQ(first_non_finite(f16.data(), DType::F16, 4), -1);
  EXPECT_EQ(first_non_finite(f16.data(), DType::F16, 6), 4);
  EXPECT_EQ(first_non_finite(f16.data() + 5, DType::F16, 1), 0);
  EXPECT_EQ(first_non_finite(bf16.data(), DType::BF16, 4), -1);
  EXPECT_EQ(first_non_finite(bf16.data(), DType::BF16, 6), 4);
  std::vector<float> f32 = {0.f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::signaling_NaN()};
  EXPECT_EQ(first_non_finite(f32.data(), DType::F32, 4), -1);
  EXPECT_EQ(first_non_finite(f32.data(), DType::F32, 6), 4);
  EXPECT_EQ(first_non_finite(f32.data() + 5, DType::F32, 1), 0);
  std::vector<unsigned char> odd(1 + 2 * sizeof(float));
  std::memcpy(odd.data() + 1 + sizeof(float), &f32[5], sizeof(float));
  EXPECT_EQ(first_non_finite(odd.data() + 1, DType::F32, 2), 1);
  const std::vector<int32_t> ints = {0x7F800000, -1};
  EXPECT_EQ(first_non_finite(ints.data(), DType::I32, 2), -1);  // not a float type
}
