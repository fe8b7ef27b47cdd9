// `ditbatch bench dit|vae|text`: times one model on random inputs and prints ms per call,
// GFLOP/s from an explicit FLOP count, peak RSS and the threads used, as an aligned table on
// stdout and one "BENCH_JSON {...}" line for scripts (tools/bench/compare_dit.sh). Weights come
// from a weight file or from RandomWeights with a named configuration, so the real 20B shapes
// can be timed without the real checkpoint.
#include <fmt/ranges.h>
#include <omp.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "app/backends.h"
#include "app/commands.h"
#include "app/options.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/timer.h"
#include "io/config.h"
#include "convert/convert.h"
#include "io/diffusers_export.h"
#include "io/weight_store.h"
#include "convert/tiny_pipeline.h"
#include "model/pipeline_configs.h"
#include "model/qwen_image_21/transformer.h"
#include "model/random_weights.h"
#include "model/text_encoder.h"
#include "model/transformer.h"
#include "model/vae.h"
#include "pipeline/image_model.h"
#include "pipeline/input_images.h"
#include "pipeline/qwen_image_pipeline.h"

namespace ditbatch {

namespace {

namespace fs = std::filesystem;

// ---- named configurations ------------------------------------------------------------------

// tiny: make-tiny's models; real: the published Qwen-Image configs (both model/pipeline_configs).
// small: each component at a size between them, the one the CPU comparison with diffusers runs
// for the DiT (4 blocks with the real joint dim); bench's own.
using Presets = std::vector<std::pair<std::string, std::string>>;

Presets presets_of(std::string PipelineConfigs::* component, std::string small) {
  return {{"tiny", tiny_pipeline_configs().*component}, {"small", std::move(small)},
          {"real", real_pipeline_configs().*component}};
}

const Presets& dit_presets() {
  static const Presets presets = presets_of(
      &PipelineConfigs::transformer,
      R"({"patch_size": 2, "in_channels": 64, "out_channels": 16, "num_layers": 4, "attention_head_dim": 64,
          "num_attention_heads": 8, "joint_attention_dim": 3584, "axes_dims_rope": [16, 24, 24]})");
  return presets;
}

const Presets& vae_presets() {
  static const Presets presets = [] {
    // The small VAE: the real one at half its base width.
    nlohmann::json small = nlohmann::json::parse(real_pipeline_configs().vae);
    small["base_dim"] = 48;
    return presets_of(&PipelineConfigs::vae, small.dump());
  }();
  return presets;
}

const Presets& text_presets() {
  static const Presets presets = presets_of(
      &PipelineConfigs::text_encoder,
      R"({"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
          "intermediate_size": 1536, "vocab_size": 152064, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0})");
  return presets;
}

// --config NAME | JSON text | path of a config.json -> (label, parsed config).
std::pair<std::string, Config> resolve_config(const std::string& value, const Presets& presets) {
  for (const auto& [name, json] : presets)
    if (value == name) return {value, Config::parse(json, "--config " + value)};
  if (!value.empty() && value.front() == '{') return {"json", Config::parse(value, "--config")};
  if (file_exists(value)) return {value, Config::parse(read_file(value), value)};
  std::string names;
  for (const auto& preset : presets) names += (names.empty() ? "" : ", ") + preset.first;
  fail_input("--config '{}': not one of {}, a JSON object or an existing config.json", value, names);
}

// Qwen-Image-2.1's transformer: make-tiny's, a small one (4 blocks of 8 heads x 64, the real text
// width and 64 latent channels) and the published one.
const Presets& dit_21_presets() {
  static const Presets presets = {
      {"tiny", tiny_pipeline_21_configs().transformer},
      {"small", R"({"patch_size": 1, "in_channels": 64, "out_channels": 64, "num_layers": 4, "attention_head_dim": 64,
          "num_attention_heads": 8, "context_in_dim": 4096, "mlp_ratio": 3, "axes_dims_rope": [16, 24, 24],
          "eps": 1e-06, "causal_condition": true})"},
      {"real", real_pipeline_21_configs().transformer}};
  return presets;
}

// ---- measuring -----------------------------------------------------------------------------

// CPU time of the whole process (all threads): with one thread, the figure that machine load
// disturbs least (wall time also counts the time other processes hold the core).
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux (the VmHWM figure)
}

// "WxH" -> (W, H), both positive multiples of `multiple`.
std::pair<int64_t, int64_t> parse_size(const std::string& text, int64_t multiple) {
  long long width = 0, height = 0;
  char extra = 0;
  if (std::sscanf(text.c_str(), "%lldx%lld%c", &width, &height, &extra) != 2 || width <= 0 || height <= 0)
    fail_input("--size '{}': expected WIDTHxHEIGHT in pixels, e.g. 256x256", text);
  if (width % multiple || height % multiple)
    fail_input("--size {}: width and height must be multiples of {}", text, multiple);
  return {width, height};
}

// Times of the timed calls and the figures derived from them.
struct Timing {
  std::vector<double> ms;      // wall time, one entry per timed call (a CFG step counts as two forwards)
  std::vector<double> cpu_ms;  // process CPU time, likewise
  double mean() const { return average(ms); }
  double min() const { return ms.empty() ? 0.0 : *std::min_element(ms.begin(), ms.end()); }
  double cpu_mean() const { return average(cpu_ms); }
  static double average(const std::vector<double>& v) {
    return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  }
  // Times fn() once and records it as `calls` calls of equal length.
  template <typename Fn>
  void time(int calls, Fn&& fn) {
    Stopwatch watch;
    const double cpu0 = process_cpu_seconds();
    fn();
    const double cpu = (process_cpu_seconds() - cpu0) * 1e3 / calls, wall = watch.seconds() * 1e3 / calls;
    for (int k = 0; k < calls; ++k) {
      ms.push_back(wall);
      cpu_ms.push_back(cpu);
    }
  }
};

struct Report {
  std::string bench, unit;                                // "dit", "forward"
  std::vector<std::pair<std::string, std::string>> rows;  // the table, after the timing lines
  nlohmann::ordered_json json;
};

// The aligned table, then the JSON line. The table's figures and the JSON's are the same numbers.
void print_report(Report& r, const Timing& timing, double flops, int warmup) {
  const double mean = timing.mean(), best = timing.min();
  std::vector<std::pair<std::string, std::string>> rows = r.rows;
  rows.emplace_back("timed", fmt::format("{} {}{} after {} warm-up", timing.ms.size(), r.unit,
                                         timing.ms.size() == 1 ? "" : "s", warmup));
  rows.emplace_back("ms/" + r.unit,
                    fmt::format("mean {:.2f}   min {:.2f}   (CPU time: mean {:.2f})", mean, best, timing.cpu_mean()));
  if (flops > 0) {
    rows.emplace_back("GFLOP/" + r.unit, fmt::format("{:.3f}", flops / 1e9));
    const bool tera = flops / mean > 1e9;  // a GPU: more than 1 TFLOP/s
    rows.emplace_back(tera ? "TFLOP/s" : "GFLOP/s",
                      fmt::format("mean {:.1f}   best {:.1f}", flops / mean * (tera ? 1e-9 : 1e-6),
                                  flops / best * (tera ? 1e-9 : 1e-6)));
  }
  rows.emplace_back("peak RSS", fmt::format("{:.1f} MiB", peak_rss_mib()));
  size_t width = 0;
  for (const auto& row : rows) width = std::max(width, row.first.size());
  std::cout << "bench " << r.bench << "\n";
  for (const auto& [key, value] : rows)
    std::cout << "  " << key << std::string(width - key.size() + 2, ' ') << value << "\n";

  r.json[fmt::format("ms_per_{}_mean", r.unit)] = mean;
  r.json[fmt::format("ms_per_{}_min", r.unit)] = best;
  r.json[fmt::format("cpu_ms_per_{}_mean", r.unit)] = timing.cpu_mean();
  r.json["timed"] = timing.ms.size();
  r.json["warmup"] = warmup;
  if (flops > 0) {
    r.json["flops"] = flops;
    r.json["gflops_per_s"] = flops / mean * 1e-6;
  } else {
    r.json["flops"] = nullptr;
    r.json["gflops_per_s"] = nullptr;
  }
  r.json["peak_rss_mib"] = peak_rss_mib();
  std::cout << "BENCH_JSON " << r.json.dump() << std::endl;
}

struct CommonOptions {
  std::string weights, config, size, backend_kind, log_level;
  std::string model;  // dit: qwen-image | qwen-image-2.1 | qwen-image-edit[-2509|-2511] (with --weights: the file's family)
  int64_t condition_images = -1;  // dit, an edit family: condition images of the output's size (-1: one)
  int steps = 3, warmup = 1, device = 0;
  int64_t text_tokens = 20;
  bool cfg = false;
  uint64_t seed = 0;
};

// The header fields every bench reports.
void common_header(Report& r, const CommonOptions& o, const std::string& config_label, Backend& be,
                   const RandomWeights* random, double weights_s) {
  const int threads = omp_get_max_threads();
  r.rows.emplace_back("backend", fmt::format("{}, {} OpenMP thread{}", be.name(), threads, threads == 1 ? "" : "s"));
  if (random)
    r.rows.emplace_back("weights", fmt::format("{:.1f} M random parameters (seed {}) made in {:.2f} s",
                                               random->values() / 1e6, o.seed, weights_s));
  else
    r.rows.emplace_back("weights", fmt::format("{} loaded in {:.2f} s", o.weights, weights_s));
  r.json["bench"] = r.bench;
  r.json["engine"] = "ditbatch";
  r.json["backend"] = be.name();
  r.json["threads"] = threads;
  r.json["config"] = config_label;
  r.json["weights_s"] = weights_s;
}

// ---- dit -----------------------------------------------------------------------------------

// The JSON fields of a dit bench's input.
void dit_input_fields(Report& r, const CommonOptions& o, int64_t width, int64_t height, int64_t S, int64_t L) {
  r.json["width"] = width;
  r.json["height"] = height;
  r.json["image_tokens"] = S;
  r.json["text_tokens"] = L;
  r.json["cfg"] = o.cfg;
  r.json["steps"] = o.steps;
}

// A dit bench's transformer weights: the --weights file's, or random ones of a --config preset.
struct DitWeights {
  std::unique_ptr<WeightStore> store;
  std::optional<Component> component;  // outlives the loader, which refers to it
  std::unique_ptr<WeightBinder> loader;
  std::unique_ptr<RandomWeights> random;
  std::string label;
  Config config;
  DitWeights(const CommonOptions& o, const Presets& presets) {
    if (!o.weights.empty()) {
      store = std::make_unique<WeightStore>(WeightStore::open(o.weights));
      component.emplace(store->component("transformer"));
      config = component->config();
      loader = std::make_unique<ComponentLoader>(*component);
      label = o.weights;
    } else {
      std::tie(label, config) = resolve_config(o.config, presets);
      random = std::make_unique<RandomWeights>(o.seed, RandomDraw::Uniform);
    }
  }
  WeightBinder& binder() { return random ? static_cast<WeightBinder&>(*random) : *loader; }
};

// The Qwen-Image MMDiT, as text to image runs it, or as an Edit pipeline does: each step over the
// noise's tokens and `condition_images` condition images of the output's size (their tokens in
// every GEMM and in the joint attention), with Edit-2511's t = 0 modulation of them where
// `zero_cond_t` (nullopt: the config's).
int bench_dit(const CommonOptions& o, Backend& be, int64_t condition_images, std::optional<bool> zero_cond_t) {
  const auto [width, height] = parse_size(o.size, 16);  // VAE factor 8 x patch 2
  const int64_t h = height / 16, w = width / 16, S = h * w, L = o.text_tokens;
  if (L < 1) fail_input("--text-tokens {}: must be at least 1", L);
  if (condition_images < 0 || condition_images > 3)
    fail_input("--condition-images {}: an edit takes 0..3 (Edit-Plus's most)", condition_images);
  const std::vector<PackedGrid> img_shapes(static_cast<size_t>(1 + condition_images), PackedGrid{h, w});
  const int64_t S_all = S * (1 + condition_images);  // the image stream: noise, then each condition image

  // The model times the steps below ask for: as `generate`, the transformer computes their
  // conditioning while it loads when that holds less memory, and the steps only look it up.
  auto model_time = [](int i, int n) { return 1.0f - static_cast<float>(i) / static_cast<float>(std::max(n, 1)); };
  std::vector<float> times;
  for (int i = 0; i < o.warmup; ++i) times.push_back(model_time(i, o.warmup));
  for (int i = 0; i < o.steps; ++i) times.push_back(model_time(i, o.steps));
  Stopwatch load;
  std::unique_ptr<QwenImageTransformer> model;
  DitWeights source(o, dit_presets());
  const std::string& label = source.label;
  TransformerConfig config = TransformerConfig::from(source.config);
  if (zero_cond_t) config.zero_cond_t = *zero_cond_t;
  const std::unique_ptr<RandomWeights>& random = source.random;
  WeightBinder& weights = source.binder();
  const std::vector<float> distinct = distinct_model_times(times);
  const bool at_load = QwenImageTransformer::conditioning_at_load_pays(config, std::ssize(distinct),
                                                                        dtype_size(be.weight_dtype()));
  model = at_load ? std::make_unique<QwenImageTransformer>(be, config, weights, times)
                  : std::make_unique<QwenImageTransformer>(be, config, weights);
  be.synchronize();
  const double weights_s = load.seconds();
  const TransformerConfig& c = model->config();

  const Tensor latents = be.upload(random_input("bench.latents", {S_all, c.in_channels}, o.seed), DType::F32);
  const Tensor text = be.upload(random_input("bench.text", {L, c.joint_attention_dim}, o.seed), be.act_dtype());
  const int per_step = o.cfg ? 2 : 1;
  // One step as the pipeline: the step's conditioning, then one forward (with --cfg: the cond and
  // negative passes as one batch; the negative text is the same tensor, its cost is the same).
  auto step = [&](int i, int n) {
    TimestepConditioning cond = model->condition(model_time(i, n));
    if (o.cfg)
      (void)model->forward_cfg(latents, text, L, text, L, img_shapes, cond);
    else
      (void)model->forward(latents, text, L, img_shapes, cond);
    be.synchronize();
  };
  for (int i = 0; i < o.warmup; ++i) step(i, o.warmup);
  Timing timing;
  for (int i = 0; i < o.steps; ++i) timing.time(per_step, [&] { step(i, o.steps); });
  const double flops = QwenImageTransformer::forward_flops(c, S_all, L);

  Report r{"dit", "forward", {}, {}};
  r.rows.emplace_back("config", fmt::format("{}: {} blocks, {} heads x {}, joint dim {}, rope axes {}", label,
                                            c.num_layers, c.num_attention_heads, c.attention_head_dim,
                                            c.joint_attention_dim, shape_str(c.axes_dims_rope)));
  r.rows.emplace_back("input", fmt::format("{}x{} -> {} image{} + {} text tokens, {}", width, height, S,
                                           condition_images > 0
                                               ? fmt::format(" + {} condition ({} image{} of that size{})", S_all - S,
                                                             condition_images, condition_images == 1 ? "" : "s",
                                                             c.zero_cond_t ? ", modulated at t = 0" : "")
                                               : std::string(),
                                           L, o.cfg ? "true CFG (2 samples a step as one batch)" : "no CFG"));
  r.rows.emplace_back("conditioning", at_load ? fmt::format("computed while loading for the {} model times (as generate): "
                                                            "no modulation GEMVs in a step",
                                                            distinct.size())
                                              : "computed each step (modulation weights kept)");
  common_header(r, o, label, be, random.get(), weights_s);
  r.json["num_layers"] = c.num_layers;
  r.json["heads"] = c.num_attention_heads;
  r.json["head_dim"] = c.attention_head_dim;
  r.json["joint_attention_dim"] = c.joint_attention_dim;
  dit_input_fields(r, o, width, height, S, L);
  r.json["conditioning_at_load"] = at_load;  // no timestep work inside a timed step
  r.json["condition_images"] = condition_images;
  r.json["condition_tokens"] = S_all - S;
  r.json["zero_cond_t"] = c.zero_cond_t;
  print_report(r, timing, flops, o.warmup);
  return 0;
}

// Qwen-Image-2.1's DiT as its pipeline runs it: the first step of an image fills the text's K/V
// cache (untimed, before the warm-up), every later step computes the image rows against it, as 39
// of the 40 default steps do; those are timed. With --cfg two forwards a step, each with its own
// cache (the pipeline's cond and negative passes).
int bench_dit_21(const CommonOptions& o, Backend& be) {
  const auto [width, height] = parse_size(o.size, 32);  // the 2.1 pipeline's size multiple
  const int64_t h = height / 16, w = width / 16, S = h * w, L = o.text_tokens;
  if (L < 1) fail_input("--text-tokens {}: must be at least 1", L);
  Stopwatch load;
  DitWeights source(o, dit_21_presets());
  const std::string& label = source.label;
  const std::unique_ptr<RandomWeights>& random = source.random;
  QwenImage21Transformer model(be, Transformer21Config::from(source.config), source.binder());
  be.synchronize();
  const double weights_s = load.seconds();
  const Transformer21Config& c = model.config();

  const Tensor latents = be.upload(random_input("bench.latents", {S, c.in_channels}, o.seed), DType::F32);
  const Tensor text = be.upload(random_input("bench.text", {L, c.context_in_dim}, o.seed), DType::F32);
  const int per_step = o.cfg ? 2 : 1;
  std::vector<Transformer21Cache> caches(static_cast<size_t>(per_step));
  auto model_time = [](int i, int n) { return 1.0f - static_cast<float>(i) / static_cast<float>(std::max(n, 1)); };
  auto step = [&](int i, int n, bool first) {
    for (Transformer21Cache& cache : caches) (void)model.forward(latents, first ? &text : nullptr, model_time(i, n), h, w, cache);
    be.synchronize();
  };
  step(0, 1, true);  // the prefill
  for (int i = 0; i < o.warmup; ++i) step(i, o.warmup, false);
  Timing timing;
  for (int i = 0; i < o.steps; ++i) timing.time(per_step, [&] { step(i, o.steps, false); });
  const double flops = QwenImage21Transformer::forward_flops(c, S, L, true);

  Report r{"dit", "forward", {}, {}};
  r.rows.emplace_back("model", "Qwen-Image-2.1 (QwenImage21Transformer2DModel)");
  r.rows.emplace_back("config", fmt::format("{}: {} blocks, {} heads x {}, text dim {}, rope axes {}", label,
                                            c.num_layers, c.num_attention_heads, c.attention_head_dim,
                                            c.context_in_dim, shape_str(c.axes_dims_rope)));
  r.rows.emplace_back("input", fmt::format("{}x{} -> {} image + {} text tokens, {}", width, height, S, L,
                                           o.cfg ? "true CFG (2 forwards a step, a cache each)" : "no CFG"));
  r.rows.emplace_back("step", "a cached step (the text's K/V from the untimed first step): the image rows only");
  common_header(r, o, label, be, random.get(), weights_s);
  r.json["model"] = "qwen-image-2.1";
  r.json["num_layers"] = c.num_layers;
  r.json["heads"] = c.num_attention_heads;
  r.json["head_dim"] = c.attention_head_dim;
  r.json["context_in_dim"] = c.context_in_dim;
  dit_input_fields(r, o, width, height, S, L);
  print_report(r, timing, flops, o.warmup);
  return 0;
}

// ---- vae -----------------------------------------------------------------------------------

int bench_vae(const CommonOptions& o, Backend& be) {
  Stopwatch load;
  std::unique_ptr<VaeDecoder> model;
  std::unique_ptr<RandomWeights> random;
  std::unique_ptr<WeightStore> store;
  std::string label;
  if (!o.weights.empty()) {
    store = std::make_unique<WeightStore>(WeightStore::open(o.weights));
    model = std::make_unique<VaeDecoder>(be, store->component("vae"));
    label = o.weights;
  } else {
    auto [name, config] = resolve_config(o.config, vae_presets());
    label = name;
    random = std::make_unique<RandomWeights>(o.seed, RandomDraw::Uniform);
    model = std::make_unique<VaeDecoder>(be, VaeConfig::from(config), *random);
  }
  be.synchronize();
  const double weights_s = load.seconds();
  const int64_t scale = model->config().spatial_scale();
  const auto [width, height] = parse_size(o.size, scale);
  const Tensor z = random_input("bench.z", {model->config().z_dim, height / scale, width / scale}, o.seed);

  auto decode = [&] {
    (void)model->decode(z);
    be.synchronize();
  };
  for (int i = 0; i < o.warmup; ++i) decode();
  Timing timing;
  for (int i = 0; i < o.steps; ++i) timing.time(1, decode);
  Report r{"vae", "decode", {}, {}};
  r.rows.emplace_back("config", fmt::format("{}: base_dim {}, dim_mult {}", label, model->config().base_dim,
                                            shape_str(model->config().dim_mult)));
  r.rows.emplace_back("input", fmt::format("z [{}, {}, {}] -> {}x{} image", model->config().z_dim, height / scale,
                                           width / scale, width, height));
  common_header(r, o, label, be, random.get(), weights_s);
  r.json["base_dim"] = model->config().base_dim;
  r.json["width"] = width;
  r.json["height"] = height;
  print_report(r, timing, 0.0, o.warmup);  // no FLOP count kept for the decoder's convolutions
  return 0;
}

// ---- text ----------------------------------------------------------------------------------

// GEMM FLOPs of one encode of L tokens: the projections, the MLP and causal attention.
double text_encoder_flops(const TextEncoderConfig& c, int64_t L) {
  const double H = static_cast<double>(c.hidden_size), q = static_cast<double>(c.num_attention_heads * c.head_dim),
               kv = static_cast<double>(c.num_key_value_heads * c.head_dim),
               I = static_cast<double>(c.intermediate_size), tokens = static_cast<double>(L);
  const double linear = 2.0 * tokens * (H * q + 2.0 * H * kv + q * H + 3.0 * H * I);
  const double attention = 2.0 * 2.0 * q * tokens * (tokens + 1.0) / 2.0;  // QK^T and PV over the causal triangle
  return static_cast<double>(c.num_hidden_layers) * (linear + attention);
}

int bench_text(const CommonOptions& o, Backend& be) {
  const int64_t L = o.text_tokens;
  if (L < 1) fail_input("--text-tokens {}: must be at least 1", L);
  Stopwatch load;
  std::unique_ptr<QwenTextEncoder> model;
  std::unique_ptr<RandomWeights> random;
  std::unique_ptr<WeightStore> store;
  std::string label;
  if (!o.weights.empty()) {
    store = std::make_unique<WeightStore>(WeightStore::open(o.weights));
    model = std::make_unique<QwenTextEncoder>(be, store->component("text_encoder"));
    label = o.weights;
  } else {
    auto [name, config] = resolve_config(o.config, text_presets());
    label = name;
    random = std::make_unique<RandomWeights>(o.seed, RandomDraw::Uniform);
    model = std::make_unique<QwenTextEncoder>(be, TextEncoderConfig::from(config), *random);
  }
  be.synchronize();
  const double weights_s = load.seconds();
  const TextEncoderConfig& c = model->config();
  std::vector<int64_t> ids(static_cast<size_t>(L));
  for (int64_t i = 0; i < L; ++i) ids[static_cast<size_t>(i)] = (i * 7919 + 151) % c.vocab_size;

  auto encode = [&] {
    (void)model->encode(ids);
    be.synchronize();
  };
  for (int i = 0; i < o.warmup; ++i) encode();
  Timing timing;
  for (int i = 0; i < o.steps; ++i) timing.time(1, encode);
  Report r{"text", "encode", {}, {}};
  r.rows.emplace_back("config", fmt::format("{}: {} layers, hidden {}, heads {} / kv {} x {}, mlp {}", label,
                                            c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
                                            c.num_key_value_heads, c.head_dim, c.intermediate_size));
  r.rows.emplace_back("input", fmt::format("{} tokens", L));
  common_header(r, o, label, be, random.get(), weights_s);
  r.json["num_layers"] = c.num_hidden_layers;
  r.json["hidden_size"] = c.hidden_size;
  r.json["text_tokens"] = L;
  print_report(r, timing, text_encoder_flops(c, L), o.warmup);
  return 0;
}

// ---- load ----------------------------------------------------------------------------------

struct LoadOptions {
  std::string out;     // write a random pipeline of real widths here first
  int64_t layers = 2;  // its transformer blocks and text-encoder layers
  std::string dtype = "bf16";
  int64_t format_version = kWeightFormatVersion;
  std::string cache = "both";  // warm | cold | both
  std::string access = "both";  // mapped | read | both (WeightAccess)
};

// The page cache of a file dropped (its pages are clean: the writer synced them): the next read
// comes from the disk. False where the kernel kept them (another process maps the file).
bool drop_cached_pages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  const bool dropped = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return dropped;
}

// The file read from start to end in 8 MiB pieces into one buffer, one thread: the rate the
// file system delivers this file at, with nothing else done to the bytes.
double sequential_read_seconds(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::vector<char> buffer(size_t{8} << 20);
  Stopwatch watch;
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buffer.data(), buffer.size(), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("{}: read failed: {}", path, std::strerror(errno));
    if (n == 0) break;
    at += n;
  }
  const double seconds = watch.seconds();
  ::close(fd);
  return seconds;
}

// VmHWM restarted from the current RSS (Linux: clear_refs 5), so that a peak measures one phase.
void reset_peak_rss() {
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

// A memory figure of /proc/self/status ("VmRSS:", "VmHWM:") in MiB; 0 where it is missing.
double status_mib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(field, 0) == 0) return std::stod(line.substr(field.size())) / 1024.0;
  return 0.0;
}

// One load as generate runs it: open and check the file, the tokenizer, the text encoder, one
// prompt encoded (timed apart: compute, not load), transformer + VAE, and the first denoising
// step of a 256x256 image (from synthetic input images written into `folder` where the model
// takes them).
struct LoadRound {
  double open_s = 0, text_encoder_s = 0, prompt_s = 0, denoiser_s = 0, first_step_s = 0, total_s = 0;
  double peak_mib = 0, rss_before_mib = 0;
};

LoadRound load_round(const std::string& path, WeightAccess access, Backend& be, const Log& log,
                     const std::string& folder) {
  LoadRound r;
  r.rss_before_mib = status_mib("VmRSS:");
  reset_peak_rss();
  Stopwatch total;
  {
    Stopwatch phase;
    const WeightStore store = WeightStore::open(path, access);
    const std::unique_ptr<ImageModel> model = ImageModel::open(store);
    const std::unique_ptr<ImageGenerator> generator =
        model->make_generator(be, log, model->default_max_sequence_length());
    ImageGenerator& pipeline = *generator;
    r.open_s = phase.seconds();
    ImageJob job;
    job.prompt = "a red fox in the snow";
    job.width = job.height = 256;
    job.steps = 2;
    job.file_stem = "bench";
    job.origin = "bench load";
    add_synthetic_input_images(job, *model, folder);
    phase = Stopwatch();
    pipeline.load_text_encoder();
    be.synchronize();
    r.text_encoder_s = phase.seconds();
    phase = Stopwatch();
    const PromptEmbedding prompt = pipeline.encode_prompt(job.prompt, job.images, nullptr);
    be.synchronize();
    r.prompt_s = phase.seconds();  // compute, not load: outside the load's sum
    phase = Stopwatch();
    pipeline.load_denoiser({job});
    be.synchronize();
    r.denoiser_s = phase.seconds();
    phase = Stopwatch();
    struct FirstStep {};
    StageTimes times;
    try {
      (void)pipeline.generate(job, prompt, nullptr, [](int, int) { throw FirstStep{}; }, times);
    } catch (const FirstStep&) {
    }
    r.first_step_s = phase.seconds();
    r.total_s = total.seconds();
    r.peak_mib = status_mib("VmHWM:");  // since reset_peak_rss()
  }
  return r;
}

int bench_load(const CommonOptions& o, const LoadOptions& lo, Backend& be, const Log& log) {
  if (lo.cache != "warm" && lo.cache != "cold" && lo.cache != "both")
    fail_input("--cache {}: expected warm, cold or both", lo.cache);
  if (lo.access != "mapped" && lo.access != "read" && lo.access != "both")
    fail_input("--access {}: expected mapped, read or both", lo.access);
  std::string path = o.weights;
  double write_s = 0;
  if (path.empty()) {
    if (lo.out.empty())
      fail_input("bench load: give --weights FILE.h5, or --out FILE.h5 (a random pipeline of the real widths with "
                 "--layers blocks is written there first)");
    const DType dtype = parse_dtype(lo.dtype);
    if (dtype != DType::BF16 && dtype != DType::F32) fail_input("--dtype {}: expected bf16 or f32", lo.dtype);
    if (lo.layers < 1)
      fail_input("--layers {}: expected at least 1 (transformer blocks and text-encoder layers of the file)", lo.layers);
    if (lo.format_version != kWeightFormatVersion && lo.format_version != 2)
      fail_input("--format {}: expected {} (this ditbatch's) or 2 (SHA-256 digests)", lo.format_version,
                 kWeightFormatVersion);
    Stopwatch written;
    write_random_pipeline({.out = lo.out,
                           .configs = real_width_pipeline_configs(lo.layers, lo.layers),
                           .dtype = dtype,
                           .format_version = lo.format_version,
                           .seed = o.seed,
                           .fast_draw = true,
                           .model_name = fmt::format("random-qwen-image-widths-{}-layers", lo.layers),
                           .source = "ditbatch bench load"},
                          log);
    write_s = written.seconds();
    path = lo.out;
  }
  const double file_gb = static_cast<double>(fs::file_size(path)) / 1e9;
  std::vector<std::string> caches;
  if (lo.cache != "cold") caches.push_back("warm");
  if (lo.cache != "warm") caches.push_back("cold");

  std::cout << "bench load\n"
            << fmt::format("  file          {} ({:.2f} GB{})\n", path, file_gb,
                           write_s > 0 ? fmt::format(", written in {:.1f} s = {:.2f} GB/s", write_s, file_gb / write_s)
                                       : "")
            << fmt::format("  backend       {}, {} OpenMP threads\n", be.name(), omp_get_max_threads());
  nlohmann::ordered_json json = {{"bench", "load"}, {"engine", "ditbatch"}, {"file", path},
                                 {"file_bytes", fs::file_size(path)}, {"backend", be.name()},
                                 {"threads", omp_get_max_threads()}};
  std::vector<std::pair<std::string, WeightAccess>> accesses;
  if (lo.access != "read") accesses.emplace_back("mapped", WeightAccess::Mapped);
  if (lo.access != "mapped") accesses.emplace_back("read", WeightAccess::Read);
  bool dropped_all = true;
  const TempFolder inputs("", "ditbatch-bench-");  // the input images of a model that takes them
  for (const std::string& cache : caches) {
    std::vector<double> read_s;
    std::vector<std::vector<LoadRound>> rounds(accesses.size());
    // The file's read and each way of loading it, in an order that turns each round, so that
    // none always meets the page cache another left.
    for (int round = 0; round < o.warmup + o.steps; ++round) {
      auto before = [&] {
        if (cache == "cold") dropped_all &= drop_cached_pages(path);
        else (void)sequential_read_seconds(path);  // the file in the page cache before a warm figure
      };
      const size_t measures = accesses.size() + 1;
      for (size_t k = 0; k < measures; ++k) {
        const size_t which = (k + static_cast<size_t>(round)) % measures;  // 0: the read
        before();
        if (which == 0) {
          const double r = sequential_read_seconds(path);
          if (round >= o.warmup) read_s.push_back(r);
        } else {
          LoadRound l = load_round(path, accesses[which - 1].second, be, log, inputs.path());
          if (round >= o.warmup) rounds[which - 1].push_back(l);
        }
      }
    }
    auto mean = [](const auto& values, auto field) {
      double sum = 0;
      for (const auto& v : values) sum += field(v);
      return sum / static_cast<double>(values.size());
    };
    const double read = mean(read_s, [](double v) { return v; });
    std::cout << fmt::format("  {} cache ({} round(s) after {} warm-up)\n", cache, o.steps, o.warmup)
              << fmt::format("    sequential read         {:7.3f} s  {:6.2f} GB/s\n", read, file_gb / read);
    json[cache] = {{"read_s", read}};
    for (size_t a = 0; a < accesses.size(); ++a) {
      const std::vector<LoadRound>& rs = rounds[a];
      const double open = mean(rs, [](const LoadRound& r) { return r.open_s; });
      const double text = mean(rs, [](const LoadRound& r) { return r.text_encoder_s; });
      const double prompt = mean(rs, [](const LoadRound& r) { return r.prompt_s; });
      const double denoiser = mean(rs, [](const LoadRound& r) { return r.denoiser_s; });
      const double step = mean(rs, [](const LoadRound& r) { return r.first_step_s; });
      const double total = mean(rs, [](const LoadRound& r) { return r.total_s; });
      const double loading = open + text + denoiser;
      double peak_extra = 0;
      for (const LoadRound& r : rs) peak_extra = std::max(peak_extra, r.peak_mib - r.rss_before_mib);
      std::cout << fmt::format("    weights {}{}\n", accesses[a].first,
                               accesses[a].second == WeightAccess::Read ? " (DITBATCH_NO_MMAP=1)" : " (the default)")
                << fmt::format("      open + tokenizer      {:7.3f} s\n", open)
                << fmt::format("      text encoder          {:7.3f} s\n", text)
                << fmt::format("      transformer + VAE     {:7.3f} s\n", denoiser)
                << fmt::format("      load in all           {:7.3f} s  {:6.2f} GB/s\n", loading, file_gb / loading)
                << fmt::format("      1 prompt encoded      {:7.3f} s (between the two loads, not counted in the load)\n",
                               prompt)
                << fmt::format("      first step (256x256)  {:7.3f} s after the load; {:.3f} s from the start\n", step,
                               total)
                << fmt::format("      peak host memory      {:7.0f} MiB above the RSS before the load\n", peak_extra)
                << fmt::format("      ratio                 {:7.3f} (load rate / read rate)\n", read / loading);
      json[cache][accesses[a].first] = {
          {"open_s", open},     {"text_encoder_s", text},   {"prompt_s", prompt}, {"denoiser_s", denoiser},
          {"load_s", loading},  {"first_step_s", step},     {"to_first_step_s", total},
          {"peak_extra_mib", peak_extra}, {"ratio", read / loading}};
    }
  }
  if (!dropped_all) std::cout << "  note: the kernel did not drop the file's pages for every cold round\n";
  std::string ratios;
  for (const std::string& cache : caches)
    for (const auto& [name, access] : accesses)
      ratios += fmt::format("  {} {} {:.3f}", cache, name, json[cache][name]["ratio"].get<double>());
  std::cout << "  load rate / read rate:" << ratios << "\n";
  std::cout << "BENCH_JSON " << json.dump() << std::endl;
  return 0;
}

// The rate at which this file system takes a new file of `bytes` bytes beside `path`: written
// in 8 MiB pieces by one thread, fsync'ed (as convert's writer finishes its file), removed.
struct SequentialWrite {
  double write_s = 0, fsync_s = 0;
  double seconds() const { return write_s + fsync_s; }
};

SequentialWrite sequential_write(const std::string& path, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", path, std::strerror(errno));
  std::vector<char> buffer(size_t{8} << 20);
  for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<char>(i * 2654435761u >> 13);  // not zeros
  Stopwatch watch;
  for (uint64_t done = 0; done < bytes;) {
    const ssize_t n = ::write(fd, buffer.data(), static_cast<size_t>(std::min<uint64_t>(buffer.size(), bytes - done)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("{}: write failed: {}", path, std::strerror(errno));
    done += static_cast<uint64_t>(n);
  }
  SequentialWrite timed;
  timed.write_s = watch.seconds();
  if (::fsync(fd) != 0) fail("{}: fsync failed: {}", path, std::strerror(errno));
  timed.fsync_s = watch.seconds() - timed.write_s;
  ::close(fd);
  fs::remove(path);
  return timed;
}

// convert of a diffusers folder written from --weights, against a sequential write of as many
// bytes on the same file system; the converted file must have the checksum of the one it came
// from (the same bytes in, the same model out).
int bench_convert(const CommonOptions& o, const LoadOptions& lo, const Log& log) {
  if (o.weights.empty())
    fail_input("bench convert: give --weights FILE.h5 (e.g. one `bench load --out F --layers N` wrote): it is written "
               "back as a diffusers folder beside it, then converted");
  const WeightStore original = WeightStore::open(o.weights);
  const std::string work =
      lo.out.empty() ? (fs::path(o.weights).parent_path() / fmt::format(".bench-convert-{}", ::getpid())).string()
                     : lo.out;
  if (fs::exists(fs::symlink_status(work))) fail_input("{}: exists; name a folder that does not exist yet", work);
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } cleanup{work};
  Stopwatch exported;
  const int64_t tensor_bytes = export_diffusers_folder(original, work + "/pipeline");
  const double export_s = exported.seconds();
  // The folder as a finished download leaves it: on disk and clean in the page cache, so no round
  // pays for its writeback. The original's pages go: convert never reads them, and they would
  // crowd the page cache the rounds write into.
  for (const auto& e : fs::recursive_directory_iterator(work + "/pipeline"))
    if (e.is_regular_file()) fsync_path(e.path().string(), false);
  drop_cached_pages(o.weights);
  std::vector<SequentialWrite> writes;
  std::vector<ConvertStats> converts;
  uint64_t file_bytes = 0;
  std::string checksum;
  for (int round = 0; round < o.warmup + o.steps; ++round) {
    const std::string to = work + "/converted.h5";
    const auto convert = [&] {
      const ConvertStats stats = convert_diffusers({.from = work + "/pipeline", .to = to, .dtype = "keep"}, log);
      file_bytes = fs::file_size(to);
      checksum = WeightStore::open(to).checksum();
      fs::remove(to);
      return stats;
    };
    // Alternated, so neither always runs on the page cache the other left dirty.
    SequentialWrite w;
    ConvertStats c;
    if (round % 2) w = sequential_write(work + "/sequential.bin", fs::file_size(o.weights)), c = convert();
    else c = convert(), w = sequential_write(work + "/sequential.bin", fs::file_size(o.weights));
    if (round < o.warmup) continue;
    writes.push_back(w);
    converts.push_back(c);
  }
  const auto mean = [](const auto& rows, auto field) {
    double sum = 0;
    for (const auto& row : rows) sum += field(row);
    return sum / static_cast<double>(rows.size());
  };
  const double write = mean(writes, [](const SequentialWrite& w) { return w.seconds(); });
  const double write_only = mean(writes, [](const SequentialWrite& w) { return w.write_s; });
  const double conv = mean(converts, [](const ConvertStats& c) { return c.seconds; });
  const double validate = mean(converts, [](const ConvertStats& c) { return c.validate_seconds; });
  const double stream = mean(converts, [](const ConvertStats& c) { return c.stream_seconds; });
  const double finish = mean(converts, [](const ConvertStats& c) { return c.finish_seconds; });
  const double gb = static_cast<double>(file_bytes) / 1e9, original_gb = static_cast<double>(fs::file_size(o.weights)) / 1e9;
  const bool same = checksum == original.checksum();
  const double ratio = (gb / conv) / (original_gb / write);
  std::cout << "bench convert\n"
            << fmt::format("  from          {} ({:.2f} GB), written as a diffusers folder ({:.2f} GB of tensors) in "
                           "{:.1f} s\n",
                           o.weights, original_gb, static_cast<double>(tensor_bytes) / 1e9, export_s)
            << fmt::format("  {} round(s) after {} warm-up, the folder in the page cache\n", o.steps, o.warmup)
            << fmt::format("    sequential write + fsync  {:7.3f} s  {:6.2f} GB/s (write {:.3f} s, fsync {:.3f} s)\n",
                           write, original_gb / write, write_only, write - write_only)
            << fmt::format("    convert (keep)            {:7.3f} s  {:6.2f} GB/s ({:.2f} GB file)\n", conv, gb / conv, gb)
            << fmt::format("      check the folder        {:7.3f} s\n", validate)
            << fmt::format("      stream the tensors      {:7.3f} s  {:6.2f} GB/s\n", stream, gb / stream)
            << fmt::format("      close, fsync, rename    {:7.3f} s\n", finish)
            << fmt::format("    checksum                  {}\n",
                           same ? "the original's" : "DIFFERS: " + checksum + " vs " + original.checksum())
            << fmt::format("    ratio                     {:7.3f} (convert's write rate / the sequential write rate)\n",
                           ratio);
  const nlohmann::ordered_json json = {
      {"bench", "convert"},     {"engine", "ditbatch"},     {"file", o.weights},
      {"file_bytes", file_bytes}, {"write_s", write},       {"write_only_s", write_only},
      {"convert_s", conv},      {"validate_s", validate},  {"stream_s", stream},
      {"finish_s", finish},     {"same_checksum", same},   {"ratio", ratio}};
  std::cout << "BENCH_JSON " << json.dump() << std::endl;
  return same ? 0 : 1;
}

}  // namespace

int cmd_bench(const std::vector<std::string>& args) {
  CommonOptions o;
  std::string what;
  po::options_description desc("options");
  LoadOptions load;
  desc.add_options()("what", po::value(&what), "dit | vae | text | load | convert (the first argument)")(
      "out", po::value(&load.out),
      "load: write a random pipeline of the real widths here first, and time loading it; convert: the scratch folder")(
      "layers", po::value(&load.layers)->default_value(2), "load --out: its transformer blocks and text-encoder layers")(
      "dtype", po::value(&load.dtype)->default_value("bf16"), "load --out: the stored dtype, bf16 or f32")(
      "format", po::value(&load.format_version)->default_value(kWeightFormatVersion),
      "load --out: the weight format (2: the older SHA-256 digests)")(
      "cache", po::value(&load.cache)->default_value("both"), "load: warm | cold | both (cold: the file's pages dropped first)")(
      "access", po::value(&load.access)->default_value("both"),
      "load: mapped (the default load) | read (DITBATCH_NO_MMAP=1) | both")(
      "weights", po::value(&o.weights), "a ditbatch .h5 to take the model from (else --config)")(
      "config", po::value(&o.config)->default_value("small"),
      "tiny | small | real | a JSON object | a config.json: random weights with this config")(
      "size", po::value(&o.size)->default_value("256x256"), "image size WxH in pixels (dit, vae)")(
      "steps", po::value(&o.steps)->default_value(3), "timed steps (dit: a step is 1 forward, 2 with --cfg)")(
      "warmup", po::value(&o.warmup)->default_value(1), "untimed steps first")(
      "text-tokens", po::value(&o.text_tokens)->default_value(20), "text tokens L (dit, text)")(
      "cfg", po::bool_switch(&o.cfg), "dit: true CFG as the pipeline runs it: cond and negative as one batch a step (2 forwards' work)")(
      "seed", po::value(&o.seed)->default_value(0), "seed of the random weights and inputs")(
      "model", po::value(&o.model)->default_value("qwen-image"),
      "dit: the family of --config, qwen-image | qwen-image-2.1 | qwen-image-edit | qwen-image-edit-2509 | "
      "qwen-image-edit-2511 (with --weights: the file's)")(
      "condition-images", po::value(&o.condition_images)->default_value(-1),
      "dit, an edit family: condition images of --size in the image stream, 0..3 (default 1)")(
      "backend", po::value(&o.backend_kind)->default_value("auto"), "auto | cpu | cuda")(
      "device", po::value(&o.device)->default_value(0), "GPU index")(
      "log-level", po::value(&o.log_level)->default_value("warn"), "debug | info | warn | error");
  po::positional_options_description positional;
  positional.add("what", 1);
  po::variables_map vm;
  if (!parse_options("bench",
                     "dit|vae|text|load|convert [--weights F.h5 | --config tiny|small|real|JSON] [--size WxH] [options]",
                     "Times one model on random inputs: ms per call (mean and min over --steps after --warmup),\n"
                     "GFLOP/s from an explicit FLOP count (dit, text; vae: time only), peak RSS and the threads\n"
                     "used. load: the sequential read rate of --weights beside the pipeline's load as generate runs\n"
                     "it (text encoder, transformer, VAE, the first step), warm and cold page cache (with --out: of\n"
                     "a random pipeline of the real widths written there first). convert: --weights written back as\n"
                     "a diffusers folder, converted again (the same checksum) beside a sequential write + fsync of\n"
                     "as many bytes. Prints a table and one line\n"
                     "'BENCH_JSON {...}' for scripts. A benchmark: its figures depend on the machine.",
                     desc, &positional, args, vm))
    return 0;
  if (what != "dit" && what != "vae" && what != "text" && what != "load" && what != "convert")
    fail_input("bench {}: say what to time: dit, vae, text, load or convert (see ditbatch bench --help)",
               what.empty() ? "''" : what);
  if (o.steps < 1 || o.warmup < 0)
    fail_input("--steps {} / --warmup {}: need steps >= 1, warmup >= 0", o.steps, o.warmup);
  if (!o.weights.empty() && !vm["config"].defaulted()) fail_input("give either --weights or --config, not both");
  Log log(0, 1, o.log_level);
  if (what == "convert") return bench_convert(o, load, log);
  std::unique_ptr<Backend> backend = make_backend(o.backend_kind, o.device, log);
  if (what == "load") return bench_load(o, load, *backend, log);
  if (what == "dit") {
    // The family: the weight file's (its ImageModel's name, as make-tiny --model spells it), else --model.
    std::string model = o.model;
    if (!o.weights.empty()) {
      const WeightStore store = WeightStore::open(o.weights);
      model = ImageModel::open(store)->family();
      std::transform(model.begin(), model.end(), model.begin(), [](unsigned char c) { return std::tolower(c); });
    }
    if (model == "qwen-image-2.1") return bench_dit_21(o, *backend);
    // The Edit families run Qwen-Image's DiT over their condition images too; 2511 modulates them at t = 0.
    const bool edit = model.starts_with("qwen-image-edit");
    if (model != "qwen-image" && model != "qwen-image-edit" && model != "qwen-image-edit-2509" &&
        model != "qwen-image-edit-2511")
      fail_input("--model '{}': qwen-image, qwen-image-2.1, qwen-image-edit, qwen-image-edit-2509 or qwen-image-edit-2511",
                 o.model);
    if (!edit && o.condition_images > 0)
      fail_input("--condition-images {}: {} takes no input image (give an edit --model)", o.condition_images, model);
    const std::optional<bool> zero_cond_t =
        edit && o.weights.empty() ? std::optional(model == "qwen-image-edit-2511") : std::nullopt;
    return bench_dit(o, *backend, edit ? (o.condition_images < 0 ? 1 : o.condition_images) : 0, zero_cond_t);
  }
  if (what == "vae") return bench_vae(o, *backend);
  return bench_text(o, *backend);
}

}  // namespace ditbatch
