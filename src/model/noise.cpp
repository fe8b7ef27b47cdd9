// Compiled with -ffp-contract=off (CMakeLists.txt): every fused multiply-add below is an
// explicit std::fma, exactly where GCC fused them in torch's AVX2 kernel; nothing else may fuse.
#include "model/noise.h"

#include <cmath>
#include <random>

#include "core/error.h"

namespace ditbatch {
namespace {

// torch's uniform for float: 24 random bits of one 32-bit MT19937 output, times 2^-24.
float uniform24(std::mt19937& mt) { return static_cast<float>(mt() & 0xFFFFFFu) * (1.0f / 16777216.0f); }

// Cephes log as avx_mathfun.h's log256_ps computes it, for x in (0, 1].
float cephes_log(float x) {
  if (f32_bits(x) < 0x00800000u) x = bits_f32(0x00800000u);  // max(x, FLT_MIN)
  const int32_t exponent_bits = static_cast<int32_t>(f32_bits(x) >> 23) - 0x7f;
  x = bits_f32((f32_bits(x) & ~0x7f800000u) | f32_bits(0.5f));  // mantissa in [0.5, 1)
  float e = static_cast<float>(exponent_bits) + 1.0f;
  if (x < 0.707106781186547524f) {
    e = e - 1.0f;
    x = (x - 1.0f) + x;
  } else {
    x = x - 1.0f;
  }
  const float z = x * x;
  float y = 7.0376836292E-2f;
  y = std::fma(y, x, -1.1514610310E-1f);
  y = std::fma(y, x, 1.1676998740E-1f);
  y = std::fma(y, x, -1.2420140846E-1f);
  y = std::fma(y, x, 1.4249322787E-1f);
  y = std::fma(y, x, -1.6668057665E-1f);
  y = std::fma(y, x, 2.0000714765E-1f);
  y = std::fma(y, x, -2.4999993993E-1f);
  y = std::fma(y, x, 3.3333331174E-1f);
  y = y * x;
  y = std::fma(y, z, e * -2.12194440e-4f);
  y = std::fma(-z, 0.5f, y);
  x = x + y;
  return std::fma(e, 0.693359375f, x);
}

// Cephes sincos as sincos256_ps computes it, for theta >= 0.
void cephes_sincos(float theta, float* sin_out, float* cos_out) {
  int32_t j = static_cast<int32_t>(theta * 1.27323954473516f);  // truncation
  j = (j + 1) & ~1;
  const float yj = static_cast<float>(j);
  const uint32_t sin_sign = (j & 4) ? 0x80000000u : 0u;
  const uint32_t cos_sign = ((~(j - 2)) & 4) ? 0x80000000u : 0u;
  const bool swap = (j & 2) != 0;
  float x = std::fma(yj, -0.78515625f, theta);
  x = std::fma(yj, -2.4187564849853515625e-4f, x);
  x = std::fma(yj, -3.77489497744594108e-8f, x);
  const float z = x * x;
  float pc = std::fma(2.443315711809948E-005f, z, -1.388731625493765E-003f);
  pc = std::fma(pc, z, 4.166664568298827E-002f);
  pc = pc * z;
  pc = std::fma(pc, z, -(z * 0.5f));
  pc = pc + 1.0f;
  float ps = std::fma(-1.9515295891E-4f, z, 8.3321608736E-3f);
  ps = std::fma(ps, z, -1.6666654611E-1f);
  ps = ps * z;
  ps = std::fma(ps, x, x);
  const float s = swap ? pc : ps, c = swap ? ps : pc;
  *sin_out = bits_f32(f32_bits(s) ^ sin_sign);
  *cos_out = bits_f32(f32_bits(c) ^ cos_sign);
}

// Box-Muller over 16 uniforms in place: pairs (k, k + 8).
void normal_block16(float* d) {
  for (int k = 0; k < 8; ++k) {
    const float u1 = 1.0f - d[k], u2 = d[k + 8];
    const float radius = std::sqrt(-2.0f * cephes_log(u1));
    const float theta = 6.2831854820251465f * u2;  // float32(2 pi) * u2
    float s, c;
    cephes_sincos(theta, &s, &c);
    d[k] = radius * c;
    d[k + 8] = radius * s;
  }
}

}  // namespace

std::vector<float> torch_randn(uint64_t seed, int64_t numel) {
  // torch only vectorises numel >= 16; smaller draws use a float64 path ditbatch never needs.
  DITBATCH_CHECK(numel >= 16, "torch_randn: numel {} < 16 is not supported", numel);
  std::mt19937 mt(static_cast<uint32_t>(seed & 0xFFFFFFFFu));  // torch's mt19937 == std::mt19937
  std::vector<float> d(static_cast<size_t>(numel));
  for (float& v : d) v = uniform24(mt);
  for (int64_t i = 0; i + 16 <= numel; i += 16) normal_block16(d.data() + i);
  if (numel % 16 != 0) {
    // The tail: 16 fresh uniforms overwrite the last 16 slots, then one more block.
    float* tail = d.data() + numel - 16;
    for (int i = 0; i < 16; ++i) tail[i] = uniform24(mt);
    normal_block16(tail);
  }
  return d;
}

Tensor initial_noise(uint64_t seed, int64_t channels, int64_t latent_h, int64_t latent_w) {
  return Tensor::host_f32({channels, latent_h, latent_w}, torch_randn(seed, channels * latent_h * latent_w));
}

}  // namespace ditbatch
