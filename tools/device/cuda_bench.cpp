// ditbatch_cuda_bench: the measurements of kernels/PERF.md on one GPU, in one run.
//
//   1. ceilings: a device-to-device copy (bytes read + written) and an 8192^3 bf16 GEMM
//   2. the transformer's GEMM shapes at M = 4096 and 8192 (TFLOP/s, median of events)
//   3. attention at the DiT shape (4096 image + 20 text tokens, 24 heads x 128) on every
//      path, and the VAE's single 384-wide head over 16,384 tokens
//   4. the real-size models with random weights (no 57 GB file): a transformer forward and a
//      true-CFG denoising step at 1024^2, the text encoder (Qwen2.5-VL-7B) on a prompt, the
//      VAE decode at 1024^2; peak GPU memory; a 50-step image extrapolated from the parts
//
// Everything is timed with CUDA events after a warm-up, median of several runs, on random
// data (never zeros). A summary table comes last. Options: --size PX (1024), --steps N (50),
// --text-tokens L (20; the forward is also timed at 8 other lengths, first call and second),
// --reps N (5), --layers N (60), --skip-models, --models-only (skips 2 and
// 3; the GEMM ceiling of 1 still runs for the MFU), --skip-te, --skip-vae;
// --info prints the devices, library versions and paths, and exits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/timer.h"
#include "cuda_backend.h"
#include "cuda_device.h"
#include "model/pipeline_configs.h"
#include "model/random_weights.h"
#include "model/text_encoder.h"
#include "model/transformer.h"
#include "model/vae.h"
#include "model/weights.h"
#include "pipeline/qwen_image_pipeline.h"
#include "pipeline/true_cfg.h"

using namespace ditbatch;

namespace {

struct Options {
  int64_t size = 1024, steps = 50, text_tokens = 20, reps = 5, layers = 60;
  bool kernels = true, models = true, te = true, vae = true, info_only = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> int64_t {
      if (i + 1 >= argc) fail_input("{} needs a value", a);
      return std::stoll(argv[++i]);
    };
    if (a == "--size") o.size = value();
    else if (a == "--steps") o.steps = value();
    else if (a == "--text-tokens") o.text_tokens = value();
    else if (a == "--reps") o.reps = std::max<int64_t>(1, value());
    else if (a == "--layers") o.layers = value();
    else if (a == "--skip-models") o.models = false;
    else if (a == "--models-only") o.kernels = false;
    else if (a == "--skip-te") o.te = false;
    else if (a == "--skip-vae") o.vae = false;
    else if (a == "--info") o.info_only = true;
    else fail_input("unknown option {} (see the comment at the top of tools/device/cuda_bench.cpp)", a);
  }
  if (o.size % 16 != 0 || o.size < 64) fail_input("--size {} must be a multiple of 16, at least 64", o.size);
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Row {
  std::string what, value, note;
};

std::vector<Row> summary;

void report(const std::string& what, const std::string& value, const std::string& note = "") {
  std::printf("  %-52s %14s  %s\n", what.c_str(), value.c_str(), note.c_str());
  std::fflush(stdout);
  summary.push_back({what, value, note});
}

double gib(size_t bytes) { return static_cast<double>(bytes) / double(1ull << 30); }

// The real-size models with random weights: transformer forward and CFG step, text encoder,
// VAE decode, peak memory, and the extrapolated image time.
void bench_models(CudaBackend& be, const Options& opt, double gemm_peak) {
  const int reps = static_cast<int>(opt.reps);
  // ---- 4. the models at full size ----
  std::printf("== models (random bf16 weights) ==\n");
  be.release_cached_memory();  // what the kernel benchmarks left cached is not the models' memory
  be.reset_peak_memory();
  double forward_ms = 0, step_ms = 0, step_two_ms = 0, te_ms = 0, te_neg_ms = 0, vae_ms = 0;
  const ModelConfigs published = parse_model_configs(real_pipeline_configs(), "cuda_bench");
  TransformerConfig dit_config = published.transformer;
  dit_config.num_layers = opt.layers;
  const int64_t gh = opt.size / 16, gw = opt.size / 16, L = opt.text_tokens;
  // As `generate` loads it for a run of these images: the conditioning of the schedule's model
  // times computed while loading, the modulation weights not kept (memory as a run holds it).
  ImageJob job;
  job.width = job.height = opt.size;
  job.steps = opt.steps;
  const std::vector<float> times = conditioning_timesteps(SchedulerConfig{}, {job});
  DITBATCH_CHECK(QwenImageTransformer::conditioning_at_load_pays(dit_config, std::ssize(times), 2),
                 "cuda_bench: --steps {}: the conditioning of {} model times would not pay at load", opt.steps,
                 times.size());
  Stopwatch load;
  RandomWeights dit_weights(1, RandomDraw::Uniform, RandomReuse::PerShape, DType::BF16);
  QwenImageTransformer dit(be, dit_config, dit_weights, times);
  be.synchronize();
  report("transformer loaded, conditioning computed", fmt::format("{:.1f} s", load.seconds()),
         fmt::format("{:.2f} B parameters, {} blocks; {} model times' conditioning ({:.0f} MB) instead of the "
                     "modulation weights ({:.1f} GB)",
                     static_cast<double>(dit_weights.values()) / 1e9, opt.layers, times.size(),
                     static_cast<double>(QwenImageTransformer::conditioning_bytes(dit_config, std::ssize(times))) / 1e6,
                     static_cast<double>(QwenImageTransformer::conditioning_weight_bytes(dit_config, 2)) / 1e9));
  Tensor latents = be.upload(random_input("bench input", {gh * gw, 64}, 30, DType::F32), DType::F32);
  Tensor text_cond = be.upload(random_input("bench input", {L, 3584}, 31, DType::F32), DType::F32);
  Tensor text_neg = be.upload(random_input("bench input", {L, 3584}, 32, DType::F32), DType::F32);
  {
    TimestepConditioning cond = dit.condition(times.front());
    Tensor warm = dit.forward(latents, text_cond, L, gh, gw, cond);  // warm-up: plans, cuDNN self-check
    Tensor warm_host = be.to_host_f32(warm);
    int64_t bad = 0;
    for (int64_t i = 0; i < warm_host.numel(); ++i) bad += !std::isfinite(warm_host.data<float>()[i]);
    if (bad) report("WARNING: non-finite transformer outputs", std::to_string(bad), "random weights");
    std::vector<double> tf, ts, ts_two;
    for (int i = 0; i < reps; ++i) tf.push_back(be.time_ms([&] { dit.forward(latents, text_cond, L, gh, gw, cond); }));
    (void)dit.forward_cfg(latents, text_cond, L, text_neg, L, gh, gw, cond);  // warm-up: the batch's shapes
    for (int i = 0; i < std::max(1, reps / 2); ++i) {
      ts.push_back(be.time_ms([&] {  // as the pipeline: the two passes as one batch
        TimestepConditioning c = dit.condition(times.back());
        auto [v, vn] = dit.forward_cfg(latents, text_cond, L, text_neg, L, gh, gw, c);
        be.axpy_(latents, -0.02f, true_cfg_combine(be, v, vn, 4.0f));
      }));
      ts_two.push_back(be.time_ms([&] {  // as diffusers: two forwards one after the other
        TimestepConditioning c = dit.condition(times.back());
        Tensor v = dit.forward(latents, text_cond, L, gh, gw, c);
        Tensor vn = dit.forward(latents, text_neg, L, gh, gw, c);
        be.axpy_(latents, -0.02f, true_cfg_combine(be, v, vn, 4.0f));
      }));
    }
    forward_ms = median(tf);
    step_ms = median(ts);
    step_two_ms = median(ts_two);
    // Host time to queue one forward (from an idle stream): well under the GPU time means the
    // host runs ahead and a CUDA graph of the step would save little; close to it means the
    // host (or a full launch queue) paces the GPU and a graph is worth building.
    std::vector<double> th;
    for (int i = 0; i < reps; ++i) {
      be.synchronize();
      Stopwatch host;
      dit.forward(latents, text_cond, L, gh, gw, cond);
      th.push_back(host.seconds() * 1e3);
    }
    be.synchronize();
    report("host time to queue one forward", fmt::format("{:.1f} ms", median(th)),
           fmt::format("{:.0f}% of the GPU time of a forward (CUDA graph decision)", 100.0 * median(th) / forward_ms));
    // A job's prompts have many lengths: the first forward at each new text length pays its
    // plans (cuDNN SDPA: one per bucket of joint lengths where cuDNN pads, else one per length,
    // with a kernel cache where cuDNN offers one; cuBLASLt: per M) and, for an engine config not
    // seen before, the cuDNN self-check.
    const int64_t lengths[] = {7, 13, 29, 47, 64, 95, 130, 200};
    std::vector<double> first, again;
    Stopwatch all;
    for (const int64_t Ln : lengths) {
      Tensor t = be.upload(random_input("bench input", {Ln, 3584}, 40 + static_cast<uint64_t>(Ln), DType::F32), DType::F32);
      first.push_back(be.time_ms([&] { dit.forward(latents, t, Ln, gh, gw, cond); }));
      again.push_back(be.time_ms([&] { dit.forward(latents, t, Ln, gh, gw, cond); }));
    }
    double first_sum = 0, again_sum = 0;
    for (size_t i = 0; i < first.size(); ++i) first_sum += first[i], again_sum += again[i];
    report(fmt::format("first forward at {} new text lengths (7..200)", std::size(lengths)),
           fmt::format("{:.1f} ms each", first_sum / static_cast<double>(first.size())),
           fmt::format("{:.2f}x the second at the same length ({:.1f} ms); {:.1f} s in all; {}",
                       first_sum / again_sum, again_sum / static_cast<double>(again.size()), all.seconds(),
                       be.stats().sdpa_status));
  }
  const double flops = QwenImageTransformer::forward_flops(dit_config, gh * gw, L);
  const double tflops = flops / (forward_ms * 1e-3) / 1e12;
  const double floor_ms = flops / (gemm_peak * 1e12) * 1e3;
  report(fmt::format("transformer forward {}^2, {} text tokens", opt.size, L), fmt::format("{:.1f} ms", forward_ms),
         fmt::format("{:.1f} TFLOP/s, MFU {:.0f}% of the measured GEMM peak, {:.2f}x the FLOP floor", tflops,
                     100.0 * tflops / gemm_peak, forward_ms / floor_ms));
  report("true-CFG step (the CFG batch, combine, Euler)", fmt::format("{:.1f} ms", step_ms),
         fmt::format("{:.3f}x the step with two separate forwards ({:.1f} ms)", step_ms / step_two_ms, step_two_ms));
  const CudaBackendStats st = be.stats();
  report("peak GPU memory, transformer and its CFG steps alone", fmt::format("{:.1f} GiB", gib(st.peak_bytes_reserved)),
         "--offload-text-encoder peaks here (+ the VAE's ~0.25 GB): target <= 45 GB");
  report("attention calls by path (cudnn/gemm/flash)",
         fmt::format("{}/{}/{}", st.attention_cudnn, st.attention_gemm, st.attention_flash), st.sdpa_status);

  if (opt.te) {
    const TextEncoderConfig& te_config = published.text_encoder;  // Qwen2.5-VL-7B's language model
    Stopwatch te_load;
    RandomWeights te_weights(2, RandomDraw::Uniform, RandomReuse::PerShape, DType::BF16);
    QwenTextEncoder te(be, te_config, te_weights);
    be.synchronize();
    report("text encoder weights uploaded", fmt::format("{:.1f} s", te_load.seconds()),
           fmt::format("{:.2f} B parameters", static_cast<double>(te_weights.values()) / 1e9));
    auto ids_of = [](int64_t n) {
      std::vector<int64_t> ids(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (i * 2654435761) % 150000;  // spread over the vocabulary
      return ids;
    };
    const auto prompt_ids = ids_of(34 + 60), negative_ids = ids_of(34 + 1);  // template + prompt
    te.encode(prompt_ids);
    std::vector<double> t1, t2;
    for (int i = 0; i < reps; ++i) t1.push_back(be.time_ms([&] { te.encode(prompt_ids); }));
    for (int i = 0; i < reps; ++i) t2.push_back(be.time_ms([&] { te.encode(negative_ids); }));
    te_ms = median(t1);
    te_neg_ms = median(t2);
    report("text encoder, 94 tokens (template + prompt)", fmt::format("{:.1f} ms", te_ms));
    report("text encoder, 35 tokens (negative prompt)", fmt::format("{:.1f} ms", te_neg_ms));
    const CudaBackendStats with_te = be.stats();
    report("peak GPU memory, transformer + text encoder resident", fmt::format("{:.1f} GiB", gib(with_te.peak_bytes_reserved)),
           "allocator peak (cudaMalloc'd), plus ~0.1 GiB of handles and workspaces");
  }
  if (opt.vae) {
    const VaeConfig& vae_config = published.vae;  // base_dim 96, dim_mult [1, 2, 4, 4]
    // f32: the VAE re-lays its conv weights from f32
    RandomWeights vae_weights(3, RandomDraw::Uniform, RandomReuse::PerShape, DType::F32);
    VaeDecoder vae(be, vae_config, vae_weights);
    const int64_t lh = opt.size / 8;
    Tensor z = random_input("bench input", {16, lh, lh}, 40, DType::F32);
    be.to_host_f32(vae.decode(z));  // warm-up
    std::vector<double> t;
    for (int i = 0; i < std::max(1, reps / 2); ++i) t.push_back(be.time_ms([&] { vae.decode(z); }));
    vae_ms = median(t);
    const CudaBackendStats after = be.stats();
    report(fmt::format("VAE decode {}^2", opt.size), fmt::format("{:.1f} ms", vae_ms),
           fmt::format("{:.0f} M parameters; convolutions: {} cuDNN, {} im2col (cuDNN {})",
                       static_cast<double>(vae_weights.values()) / 1e6, after.conv_cudnn, after.conv_im2col,
                       after.conv_status));
    if (after.conv_cudnn > 0) {  // the same decode on the im2col path: what cuDNN's convolution buys
      const CudaConvPath path = be.options().conv;
      be.set_conv_path(CudaConvPath::Im2col);
      be.to_host_f32(vae.decode(z));
      t.clear();
      for (int i = 0; i < std::max(1, reps / 2); ++i) t.push_back(be.time_ms([&] { vae.decode(z); }));
      report(fmt::format("VAE decode {}^2, im2col + cuBLASLt", opt.size), fmt::format("{:.1f} ms", median(t)),
             fmt::format("{:.2f}x the cuDNN time", median(t) / vae_ms));
      be.set_conv_path(path);
    }
  }
  const CudaBackendStats end = be.stats();
  report("peak GPU memory (all models loaded)", fmt::format("{:.1f} GiB", gib(end.peak_bytes_reserved)),
         fmt::format("{} cudaMalloc calls in all", end.device_mallocs));
  const double image_s = (te_ms + te_neg_ms + static_cast<double>(opt.steps) * step_ms + vae_ms) / 1e3;
  report(fmt::format("{}-step true-CFG image {}^2 (extrapolated)", opt.steps, opt.size), fmt::format("{:.2f} s", image_s),
         "2 text encodes + steps x CFG step + VAE");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options opt = parse(argc, argv);
    Log log(0, 1, "info");
    if (cuda_device_count() == 0) {
      std::printf("%s\n", cuda_describe_devices().c_str());
      return 3;
    }
    std::printf("== devices ==\n%s\n== libraries ==\n%s\n%s\n", cuda_describe_devices().c_str(),
                cuda_library_versions().c_str(), cuda_library_paths().c_str());
    CudaBackendOptions bo = CudaBackendOptions::from_env(0);
    bo.act_dtype = DType::BF16;
    CudaBackend be(bo, log);
    const int reps = static_cast<int>(opt.reps);
    if (opt.info_only) {
      std::printf("cuDNN SDPA: %s\n", be.stats().sdpa_status.c_str());
      return 0;
    }

    // ---- 1. ceilings ----
    std::printf("== ceilings ==\n");
    double copy_tbs = 0, gemm_peak = 0;
    {
      const size_t bytes = size_t{2} << 30;
      void *a = nullptr, *b = nullptr;
      cudaEvent_t start = nullptr, stop = nullptr;
      if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess)
        fail("copy ceiling: cannot allocate 2 x 2 GiB");
      cudaEventCreate(&start);
      cudaEventCreate(&stop);
      cudaMemset(a, 0x3c, bytes);
      std::vector<double> t;
      for (int i = 0; i < reps + 2; ++i) {
        cudaEventRecord(start, nullptr);
        cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, nullptr);
        cudaEventRecord(stop, nullptr);
        cudaEventSynchronize(stop);
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        if (i >= 2) t.push_back(ms);
      }
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
      cudaFree(a);
      cudaFree(b);
      copy_tbs = 2.0 * static_cast<double>(bytes) / (median(t) * 1e-3) / 1e12;
      report("device-to-device copy (read + write)", fmt::format("{:.2f} TB/s", copy_tbs), "2 GiB buffers");
    }
    {
      const int64_t n = 8192;
      Tensor x = be.upload(random_input("bench input", {n, n}, 1, DType::BF16), DType::BF16);
      Tensor w = be.upload(random_input("bench input", {n, n}, 2, DType::BF16, 0.01f), DType::BF16);
      be.linear(x, w);  // warm-up: plan and algorithm
      std::vector<double> t;
      for (int i = 0; i < reps; ++i) t.push_back(be.time_ms([&] { be.linear(x, w); }));
      gemm_peak = 2.0 * n * n * n / (median(t) * 1e-3) / 1e12;
      report("bf16 GEMM 8192^3 (cuBLASLt, fp32 accumulate)", fmt::format("{:.0f} TFLOP/s", gemm_peak),
             fmt::format("{:.3f} ms", median(t)));
    }

    if (opt.kernels) {
      // ---- 2. the transformer's GEMM shapes ----
      std::printf("== GEMM shapes (y = x w^T + b) ==\n");
      for (const int64_t M : {int64_t{4096}, int64_t{8192}}) {
        struct NK {
          int64_t N, K;
          const char* what;
          DType out;
        };
        for (const NK s : {NK{9216, 3072, "fused qkv", DType::BF16}, NK{3072, 3072, "q/k/v or out-proj", DType::BF16},
                           NK{3072, 3072, "out-proj -> f32 residual", DType::F32},
                           NK{12288, 3072, "mlp up", DType::BF16}, NK{3072, 12288, "mlp down -> f32", DType::F32}}) {
          Tensor x = be.upload(random_input("bench input", {M, s.K}, 10 + M, DType::BF16), DType::BF16);
          Tensor w = be.upload(random_input("bench input", {s.N, s.K}, 11, DType::BF16, 0.02f), DType::BF16);
          Tensor b = be.upload(random_input("bench input", {s.N}, 12, DType::BF16, 0.02f), DType::BF16);
          be.linear(x, w, &b, s.out);
          std::vector<double> t;
          for (int i = 0; i < reps; ++i) t.push_back(be.time_ms([&] { be.linear(x, w, &b, s.out); }));
          const double tflops = 2.0 * M * s.N * s.K / (median(t) * 1e-3) / 1e12;
          report(fmt::format("GEMM M {} N {} K {} ({})", M, s.N, s.K, s.what), fmt::format("{:.0f} TFLOP/s", tflops),
                 fmt::format("{:.3f} ms", median(t)));
        }
      }

      // ---- 3. attention ----
      std::printf("== attention ==\n");
      auto time_attention = [&](const char* what, int64_t L, int64_t H, int64_t Dh) {
        Tensor q = be.upload(random_input("bench input", {L, H, Dh}, 20, DType::BF16), DType::BF16);
        Tensor k = be.upload(random_input("bench input", {L, H, Dh}, 21, DType::BF16), DType::BF16);
        Tensor v = be.upload(random_input("bench input", {L, H, Dh}, 22, DType::BF16), DType::BF16);
        const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));
        const double flops = 4.0 * L * L * H * Dh;
        double cudnn_ms = 0;
        for (const auto path : {CudaAttentionPath::Cudnn, CudaAttentionPath::Gemm, CudaAttentionPath::Flash}) {
          be.set_attention_path(path);
          const CudaBackendStats before = be.stats();
          be.attention(q, k, v, scale, false);  // warm-up (and the cuDNN plan + its self-check)
          const CudaBackendStats after = be.stats();
          const char* ran = after.attention_cudnn > before.attention_cudnn ? "cudnn"
                            : after.attention_flash > before.attention_flash ? "flash"
                                                                             : "gemm";
          const char* asked = path == CudaAttentionPath::Cudnn ? "cudnn" : path == CudaAttentionPath::Gemm ? "gemm" : "flash";
          if (std::string(asked) != ran) {
            report(fmt::format("attention {} via {}", what, asked), "n/a", fmt::format("ran {}: {}", ran, after.sdpa_status));
            continue;
          }
          std::vector<double> t;
          for (int i = 0; i < std::max(1, reps / 2); ++i) t.push_back(be.time_ms([&] { be.attention(q, k, v, scale, false); }));
          report(fmt::format("attention {} via {}", what, asked), fmt::format("{:.0f} TFLOP/s", flops / (median(t) * 1e-3) / 1e12),
                 fmt::format("{:.3f} ms", median(t)));
          if (path == CudaAttentionPath::Cudnn) cudnn_ms = median(t);
        }
        // The transformer's call: spare rows past each tensor, so that cuDNN pads L to its
        // bucket and masks the rest (one plan per bucket instead of one per prompt length).
        be.set_attention_path(CudaAttentionPath::Cudnn);
        if (const int64_t spare = be.attention_spare_rows(); spare > 0 && cudnn_ms > 0) {
          auto rows = [&](uint64_t seed) {
            return be.upload(random_input("bench input", {L + spare, H, Dh}, seed, DType::BF16), DType::BF16);
          };
          const Tensor qs = rows(20), ks = rows(21), vs = rows(22), os = be.empty({L + spare, H, Dh}, DType::BF16);
          auto call = [&] {
            be.attention(qs.slice0(0, L), ks.slice0(0, L), vs.slice0(0, L), scale, false, os.slice0(0, L), spare);
          };
          const CudaBackendStats before = be.stats();
          call();
          if (be.stats().attention_cudnn_padded > before.attention_cudnn_padded) {
            std::vector<double> t;
            for (int i = 0; i < std::max(1, reps / 2); ++i) t.push_back(be.time_ms(call));
            report(fmt::format("attention {} via cudnn, padded to the bucket", what),
                   fmt::format("{:.0f} TFLOP/s", flops / (median(t) * 1e-3) / 1e12),
                   fmt::format("{:.3f} ms, {:.3f}x the exact-length plan", median(t), median(t) / cudnn_ms));
          } else {
            report(fmt::format("attention {} via cudnn, padded to the bucket", what), "n/a",
                   "not padded: " + be.stats().sdpa_status);
          }
        }
        be.set_attention_path(bo.attention);
      };
      const int64_t S = (opt.size / 16) * (opt.size / 16);
      time_attention(fmt::format("DiT L {} H 24 D 128", S + opt.text_tokens).c_str(), S + opt.text_tokens, 24, 128);
      time_attention(fmt::format("VAE L {} H 1 D 384", (opt.size / 8) * (opt.size / 8)).c_str(),
                     (opt.size / 8) * (opt.size / 8), 1, 384);
      be.synchronize();
    }

    if (opt.models) bench_models(be, opt, gemm_peak);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_bench failed: %s\n", e.what());
    std::printf("\n== summary (incomplete: %s) ==\n", e.what());
    for (const Row& r : summary) std::printf("| %s | %s | %s |\n", r.what.c_str(), r.value.c_str(), r.note.c_str());
    return 1;
  }
  std::printf("\n== summary ==\n| what | measured | note |\n|---|---|---|\n");
  for (const Row& r : summary) std::printf("| %s | %s | %s |\n", r.what.c_str(), r.value.c_str(), r.note.c_str());
  return 0;
}
