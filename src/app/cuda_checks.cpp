#ifdef DITBATCH_HAVE_CUDA

#include "app/cuda_checks.h"

#include <fmt/format.h>

#include <cmath>
#include <sstream>

#include "cpu/cpu_backend.h"
#include "cuda_device.h"
#include "selftest/op_cases.h"
#include "selftest/op_check.h"
#include "selftest/random_inputs.h"

namespace ditbatch {

namespace {

using selftest::random_tensor;
using selftest::round_bf16;

int64_t count_nonfinite_host(const Tensor& t) {
  int64_t n = 0;
  for (int64_t i = 0; i < t.numel(); ++i) n += !std::isfinite(t.data<float>()[i]);
  return n;
}

// A path that errs must not take the selftest down: its error is the check's failure.
template <typename F>
PathCheck guarded(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    PathCheck r;
    r.failure = e.what();
    return r;
  }
}

}  // namespace

const std::vector<AttentionPathCase>& attention_path_cases() {
  static const std::vector<AttentionPathCase> cases = {
      {"dit_like", 333, 317, 4, 4, 128, false},      // joint attention: cuDNN-eligible
      {"dit_padded", 333, 317, 4, 4, 128, false, 127},  // with the transformer's spare rows: padded to 384
      {"dit_heads24", 160, 150, 24, 24, 128, false},  // the real head count
      {"text_encoder_gqa", 200, 200, 28, 4, 128, true},
      {"vae_single_head", 300, 300, 1, 1, 384, false},
      {"head64", 129, 65, 2, 2, 64, false},
      // The GEMM path in several query chunks (at 1024^2 the VAE's 16,384 tokens take two): a
      // cap of 100 rows rounds down to 64 (64, 64, 64, 8), and causal GQA in chunks of 48 whose
      // keys grow with the chunk (48, 96, 144, 150; leading dimension 152).
      {"vae_chunked", 200, 200, 1, 1, 384, false, 0, 100},
      {"text_encoder_chunked", 150, 150, 4, 2, 64, true, 0, 48},
  };
  return cases;
}

const std::vector<ConvPathCase>& conv_path_cases() {
  static const std::vector<ConvPathCase> cases = {
      {"small", 16, 9, 16, 8},
      {"vae_conv_in", 24, 20, 16, 384},  // z 16 -> 384 at the latent resolution
      {"vae_96", 64, 48, 96, 96},         // the last up block's width
      {"vae_conv_out", 20, 12, 96, 3},    // 3 output channels: im2col even when cuDNN is asked for
  };
  return cases;
}

PathCheck check_attention_path(CudaBackendOptions options, const AttentionPathCase& a, CudaAttentionPath path) {
  return guarded([&] {
    options.act_dtype = DType::BF16;
    options.attention = path;
    options.attention_chunk_rows = a.chunk_rows;
    CudaBackend be(options, Log(0, 1, "warn"));
    const Tensor q = round_bf16(random_tensor({a.Lq, a.H, a.Dh}, 101, 2.0f));
    const Tensor k = round_bf16(random_tensor({a.Lk, a.Hkv, a.Dh}, 102, 2.0f));
    const Tensor v = round_bf16(random_tensor({a.Lk, a.Hkv, a.Dh}, 103));
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.Dh)));
    PathCheck r;
    r.status_before = be.stats().sdpa_status;
    // Each tensor the first rows of a buffer with a.spare more: random rows after q, k and v
    // (keys a padded call must mask off), poisoned ones after out.
    auto with_spare = [&](const Tensor& t, uint32_t seed) {
      Tensor buffer = be.upload(round_bf16(random_tensor({t.dim(0) + a.spare, t.dim(1), t.dim(2)}, seed, 2.0f)),
                                DType::BF16);
      be.copy_(buffer.slice0(0, t.dim(0)), be.upload(t, DType::BF16));
      return buffer.slice0(0, t.dim(0));
    };
    const Tensor out_rows = be.empty({a.Lq + a.spare, a.H, a.Dh}, DType::BF16).slice0(0, a.Lq);
    be.attention(with_spare(q, 104), with_spare(k, 105), with_spare(v, 106), scale, a.causal, out_rows, a.spare);
    const Tensor out = be.to_host_f32(out_rows);
    const CudaBackendStats st = be.stats();
    r.status_after = st.sdpa_status;
    r.ran = st.attention_cudnn_padded ? "cudnn padded"
            : st.attention_cudnn      ? "cudnn"
            : st.attention_flash      ? "flash"
                                      : "gemm";
    r.nonfinite = count_nonfinite_host(out);
    r.gemm_chunks = st.attention_gemm_chunks;
    CpuBackend cpu;
    r.error_vs_cpu = selftest::nmse(out, cpu.attention(q, k, v, scale, a.causal));  // fp32, a second opinion
    const std::vector<double> ref = selftest::attention_f64(q, k, v, scale, a.causal);
    const std::vector<double> naive = selftest::naive_bf16_attention(q, k, v, scale, a.causal);
    r.error = selftest::nmse(out, ref);
    r.naive_bf16 = selftest::nmse(Tensor::host_f32(out.shape(), std::vector<float>(naive.begin(), naive.end())), ref);
    const bool eligible = !a.causal && a.H == a.Hkv && a.Dh % 8 == 0 && a.Dh <= 128;
    if (r.nonfinite > 0)
      r.failure = fmt::format("{} NaN/Inf (or unwritten) element(s)", r.nonfinite);
    else if (!(r.error <= 4.0 * r.naive_bf16 + 1e-9))
      r.failure = fmt::format("FlashAttention's rule: nmse {:.3g} vs float64, more than 4x naive bf16's {:.3g}", r.error,
                              r.naive_bf16);
    else if (!(r.error_vs_cpu <= 1e-4))
      r.failure = fmt::format("nmse {:.3g} vs the CPU backend, above 1e-4", r.error_vs_cpu);
    else if (path == CudaAttentionPath::Cudnn && eligible && r.status_before.rfind("available", 0) == 0 &&
             r.ran.rfind("cudnn", 0) != 0)
      r.failure = "cuDNN SDPA was available but did not run: " + r.status_after;
    else if (path == CudaAttentionPath::Cudnn && eligible && a.spare > 0 &&
             r.status_before.find("lengths padded") != std::string::npos && r.ran != "cudnn padded")
      r.failure = "cuDNN SDPA pads lengths, but this call with spare rows ran " + r.ran + ": " + r.status_after;
    else if ((path == CudaAttentionPath::Flash && r.ran != "flash") || (path == CudaAttentionPath::Gemm && r.ran != "gemm"))
      r.failure = fmt::format("{} was asked for and {} ran", attention_path_name(path), r.ran);
    else if (r.ran == "gemm" && a.chunk_rows > 0 && a.chunk_rows < a.Lq && r.gemm_chunks < 2)
      r.failure = fmt::format("the GEMM path took {} chunk(s) for {} query rows at most {} a chunk", r.gemm_chunks, a.Lq,
                              a.chunk_rows);
    return r;
  });
}

PathCheck check_conv_path(CudaBackendOptions options, const ConvPathCase& c, CudaConvPath path) {
  return guarded([&] {
    options.act_dtype = DType::BF16;
    options.conv = path;
    CudaBackend be(options, Log(0, 1, "warn"));
    const Tensor x = round_bf16(random_tensor({c.H, c.W, c.Cin}, 301, 3.0f));
    const Tensor w = round_bf16(random_tensor({c.Cout, 9 * c.Cin}, 302, 0.3f));
    const Tensor b = round_bf16(random_tensor({c.Cout}, 303));
    PathCheck r;
    r.status_before = be.stats().conv_status;
    const Tensor out = be.to_host_f32(be.conv2d_3x3(be.upload(x, DType::BF16), be.upload_weight(w), be.upload_weight(b)));
    const CudaBackendStats st = be.stats();
    r.status_after = st.conv_status;
    r.ran = st.conv_cudnn ? "cudnn" : "im2col";
    r.nonfinite = count_nonfinite_host(out);
    CpuBackend cpu;
    r.error = r.error_vs_cpu = selftest::nmse(out, cpu.conv2d_3x3(x, w, b));
    const bool eligible = c.Cin % 8 == 0 && c.Cout % 8 == 0;
    if (r.nonfinite > 0)
      r.failure = fmt::format("{} NaN/Inf (or unwritten) element(s)", r.nonfinite);
    else if (!(r.error <= 2e-5))  // one bf16 rounding of the output, with a margin
      r.failure = fmt::format("nmse {:.3g} vs the CPU backend, above 2e-5", r.error);
    else if (path == CudaConvPath::Cudnn && eligible && r.status_before.rfind("available", 0) == 0 && r.ran != "cudnn")
      r.failure = "cuDNN convolution was available but did not run: " + r.status_after;
    else if (path == CudaConvPath::Im2col && r.ran != "im2col")
      r.failure = "im2col was asked for and cudnn ran";
    return r;
  });
}

void check_cuda_paths(selftest::Report& report, int device, bool quick) {
  // cuDNN's own output is checked here: its run-time self-check (which would replace a wrong
  // result with ours) is off; every allocation is poisoned so that an unwritten element shows.
  CudaBackendOptions options = CudaBackendOptions::from_env(device);
  options.cudnn_self_check = false;
  options.poison = true;
  options.sync_each_op = true;
  auto add = [&](const std::string& group, const std::string& name, const PathCheck& r, const std::string& auto_ran) {
    std::string result;
    if (r.failure.empty() || !r.ran.empty())
      result = r.naive_bf16 >= 0
                   ? fmt::format("ran {}: nmse {:.2g} vs float64 (naive bf16 {:.2g}), {:.2g} vs cpu", r.ran, r.error,
                                 r.naive_bf16, r.error_vs_cpu)
                   : fmt::format("ran {}: nmse {:.2g} vs cpu", r.ran, r.error_vs_cpu);
    const std::string picked = auto_ran.empty() ? "" : fmt::format("auto picks {}", auto_ran);
    report.add(selftest::CheckRow{group, name, r.failure.empty() ? selftest::Status::Pass : selftest::Status::Fail,
                                  result, r.failure.empty() ? picked : r.failure});
  };
  for (const auto& c : attention_path_cases()) {
    if (quick && std::string(c.name) != "dit_like") continue;
    const PathCheck by_auto = check_attention_path(options, c, CudaAttentionPath::Auto);
    add("attention paths", fmt::format("{} via auto", c.name), by_auto, "");
    for (const auto path : {CudaAttentionPath::Cudnn, CudaAttentionPath::Gemm, CudaAttentionPath::Flash}) {
      if (quick && path == CudaAttentionPath::Flash) continue;
      add("attention paths", fmt::format("{} via {}", c.name, attention_path_name(path)),
          check_attention_path(options, c, path), by_auto.ran);
    }
  }
  for (const auto& c : conv_path_cases()) {
    if (quick && std::string(c.name) != "vae_96") continue;
    const PathCheck by_auto = check_conv_path(options, c, CudaConvPath::Auto);
    add("convolution paths", fmt::format("{} via auto", c.name), by_auto, "");
    for (const auto path : {CudaConvPath::Cudnn, CudaConvPath::Im2col})
      add("convolution paths", fmt::format("{} via {}", c.name, conv_path_name(path)), check_conv_path(options, c, path),
          by_auto.ran);
  }
}

void describe_cuda(selftest::Report& report, int device) {
  std::istringstream lines(cuda_describe_devices());
  std::string line, mine;
  while (std::getline(lines, line))
    if (line.rfind(fmt::format("{}:", device), 0) == 0) mine = line.substr(line.find(':') + 2);
  report.environment("gpu", mine.empty() ? cuda_describe_devices() : mine);
  report.environment("gpu uuid", cuda_device_uuid(device));
  report.environment("cuda libraries", cuda_library_versions());
  std::string paths = cuda_library_paths();
  for (auto& ch : paths)
    if (ch == '\n') ch = ';';
  report.environment("loaded from", paths);
  const std::string image = cuda_kernel_image_check();
  report.environment("kernel image", image.empty() ? "runs on this GPU" : image);
  try {
    CudaBackend be(CudaBackendOptions::from_env(device), Log(0, 1, "error"));
    const CudaBackendStats st = be.stats();
    report.environment("cuDNN SDPA", st.sdpa_status);
    report.environment("cuDNN convolution", st.conv_status);
    if (const auto memory = be.device_memory())
      report.environment("gpu memory", fmt::format("{:.1f} GiB free of {:.1f} GiB", memory->free_bytes / double(1 << 30),
                                                   memory->total_bytes / double(1 << 30)));
  } catch (const std::exception& e) {
    report.environment("cuda backend", std::string("cannot start: ") + e.what());
  }
}

}  // namespace ditbatch

#endif  // DITBATCH_HAVE_CUDA
