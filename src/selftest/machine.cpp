#include "selftest/machine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/timer.h"

namespace ditbatch::selftest {

namespace {

// A [rows, cols] tensor of the activation dtype with values in about [-1, 1]: a small random
// block uploaded once and repeated on the device (uploading hundreds of MB from the host would
// take longer than the measurements).
Tensor device_filled(Backend& be, int64_t rows, int64_t cols, uint32_t seed) {
  Tensor out = be.empty({rows, cols}, be.act_dtype());
  const int64_t block = std::min<int64_t>(rows, 256);
  std::vector<float> host(static_cast<size_t>(block * cols));
  uint32_t s = seed * 2654435761u + 1;
  for (auto& v : host) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(s >> 8) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
  }
  const Tensor piece = be.upload(Tensor::host_f32({block, cols}, host), be.act_dtype());
  for (int64_t r = 0; r < rows; r += block) {
    const int64_t n = std::min(block, rows - r);
    be.copy_(out.slice0(r, r + n), piece.slice0(0, n));
  }
  be.synchronize();
  return out;
}

// The median seconds of one call of fn, after a warm-up call; enough repetitions to take
// about `budget` seconds, at least 3.
template <typename F>
double median_seconds(Backend& be, F&& fn, double budget = 0.25) {
  Stopwatch first;
  fn();
  be.synchronize();
  const double once = std::max(first.seconds(), 1e-6);
  const int reps = static_cast<int>(std::clamp(budget / once, 3.0, 50.0));
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    Stopwatch w;
    fn();
    be.synchronize();
    times.push_back(w.seconds());
  }
  std::nth_element(times.begin(), times.begin() + reps / 2, times.end());
  return times[static_cast<size_t>(reps / 2)];
}

}  // namespace

Measurement measure_gemm(Backend& be, int64_t M, int64_t K, int64_t N, const std::string& what) {
  const Tensor x = device_filled(be, M, K, 1);
  const Tensor w = device_filled(be, N, K, 2);
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(K) * static_cast<double>(N);
  Measurement m;
  m.name = what.empty() ? fmt::format("gemm M{} K{} N{}", M, K, N) : fmt::format("gemm M{} K{} N{} ({})", M, K, N, what);
  m.metric = what.empty() ? "gemm" : "gemm_model";
  m.seconds = median_seconds(be, [&] { be.linear(x, w); });
  m.value = flops / m.seconds / 1e12;
  m.unit = "TFLOP/s";
  m.counted = fmt::format("{:.3g} TFLOP a call (2 M K N, {})", flops / 1e12, dtype_name(be.act_dtype()));
  return m;
}

Measurement measure_copy(Backend& be, int64_t bytes) {
  const int64_t cols = 4096, rows = std::max<int64_t>(1, bytes / (cols * static_cast<int64_t>(dtype_size(be.act_dtype()))));
  const Tensor src = device_filled(be, rows, cols, 3);
  Tensor dst = be.empty({rows, cols}, be.act_dtype());
  const double moved = 2.0 * static_cast<double>(src.nbytes());
  Measurement m;
  m.name = fmt::format("device copy {:.0f} MB", static_cast<double>(src.nbytes()) / 1e6);
  m.metric = "copy";
  m.seconds = median_seconds(be, [&] { be.copy_(dst, src); });
  m.value = moved / m.seconds / 1e9;
  m.unit = "GB/s";
  m.counted = fmt::format("{:.3g} GB a call (read + written)", moved / 1e9);
  return m;
}

Measurement measure_attention(Backend& be, int64_t L, int64_t H, int64_t Dh, const std::string& what) {
  const Tensor q = device_filled(be, L, H * Dh, 4).view({L, H, Dh});
  const Tensor k = device_filled(be, L, H * Dh, 5).view({L, H, Dh});
  const Tensor v = device_filled(be, L, H * Dh, 6).view({L, H, Dh});
  const double flops = 4.0 * static_cast<double>(L) * static_cast<double>(L) * static_cast<double>(H * Dh);
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  Measurement m;
  m.name = fmt::format("attention L{} H{} Dh{} ({})", L, H, Dh, what);
  m.metric = "attention";
  m.seconds = median_seconds(be, [&] { be.attention(q, k, v, scale, false); });
  m.value = flops / m.seconds / 1e12;
  m.unit = "TFLOP/s";
  m.counted = fmt::format("{:.3g} TFLOP a call (4 L^2 H Dh)", flops / 1e12);
  return m;
}

std::vector<Measurement> measure_machine(Backend& be, bool quick) {
  const bool gpu = be.device() != Device::Host;
  std::vector<Measurement> out;
  const int64_t n = gpu ? 8192 : 512;
  out.push_back(measure_gemm(be, n, n, n, ""));
  out.push_back(measure_copy(be, gpu ? (int64_t{1} << 30) : (int64_t{64} << 20)));
  if (quick) return out;
  // The transformer at 1024^2 with true CFG: 4096 image tokens per sample, both samples' image
  // rows in one GEMM (M 8192); the text stream's GEMMs have a few dozen rows against the same
  // weights (bandwidth-bound); joint attention over text + image tokens, 24 heads of 128.
  const int64_t M = gpu ? 8192 : 128, text = 64;
  out.push_back(measure_gemm(be, M, 3072, 3072, "attn.to_q/k/v, to_out"));
  out.push_back(measure_gemm(be, M, 3072, 12288, "img_mlp up"));
  out.push_back(measure_gemm(be, M, 12288, 3072, "img_mlp down"));
  out.push_back(measure_gemm(be, text, 3072, 12288, "txt_mlp up, 64 text rows"));
  out.push_back(measure_attention(be, gpu ? 4096 + text : 256 + text, 24, 128, gpu ? "1024^2 joint" : "256^2 joint"));
  return out;
}

}  // namespace ditbatch::selftest
