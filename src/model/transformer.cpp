#include "model/transformer.h"

#include <sleef.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "core/error.h"

namespace ditbatch {

TransformerConfig TransformerConfig::from(const Config& comp) {
  TransformerConfig c;
  c.patch_size = comp.get_int("patch_size");
  c.in_channels = comp.get_int("in_channels", 1, kMaxConfigWidth);
  c.out_channels = comp.get_int("out_channels", 1, kMaxConfigWidth);
  c.num_layers = comp.get_int("num_layers", 1, kMaxConfigDepth);
  c.attention_head_dim = comp.get_int("attention_head_dim", 1, kMaxConfigWidth);
  c.num_attention_heads = comp.get_int("num_attention_heads", 1, kMaxConfigWidth);
  c.joint_attention_dim = comp.get_int("joint_attention_dim", 1, kMaxConfigWidth);
  c.axes_dims_rope = comp.get_ints("axes_dims_rope");
  if (c.num_attention_heads * c.attention_head_dim > kMaxConfigWidth)  // both <= 2^20: no overflow
    fail_input("{}: num_attention_heads {} x attention_head_dim {} is past {}", comp.where(), c.num_attention_heads,
               c.attention_head_dim, kMaxConfigWidth);
  if (comp.has("guidance_embeds") && comp.get_bool("guidance_embeds"))
    fail_input("{}: guidance_embeds = true is not supported (Qwen-Image is not guidance-distilled)", comp.where());
  c.zero_cond_t = comp.has("zero_cond_t") && comp.get_bool("zero_cond_t");
  for (const char* key : {"use_additional_t_cond", "use_layer3d_rope"})
    if (comp.has(key) && comp.get_bool(key))
      fail_input("{}: {} = true is a Qwen-Image variant ditbatch does not implement", comp.where(), key);
  if (c.patch_size != 2 || c.in_channels != 4 * c.out_channels)
    fail_input("{}: patch_size {} and in_channels {} / out_channels {}: the Qwen-Image packing needs patch 2 and "
               "in_channels = 4 * out_channels",
               comp.where(), c.patch_size, c.in_channels, c.out_channels);
  int64_t axes_sum = 0;
  for (int64_t d : c.axes_dims_rope) {
    if (d <= 0 || d % 2 || d > kMaxConfigWidth)
      fail_input("{}: axes_dims_rope entries must be positive and even (and at most {})", comp.where(),
                 kMaxConfigWidth);
    axes_sum += d;
  }
  if (c.axes_dims_rope.size() != 3 || axes_sum != c.attention_head_dim)
    fail_input("{}: axes_dims_rope {} must be 3 axes summing to attention_head_dim {}", comp.where(),
               shape_str(c.axes_dims_rope), c.attention_head_dim);
  if (c.num_layers < 1 || c.num_attention_heads < 1)
    fail_input("{}: num_layers {} and num_attention_heads {} must be positive", comp.where(), c.num_layers,
               c.num_attention_heads);
  return c;
}

void QwenImageTransformer::bind(WeightBinder& b, Backend* be, const TransformerConfig& c, Weights& w,
                                const std::function<void(Block&)>& after_block) {
  const int64_t D = c.inner_dim(), F = c.ff_dim(), J = c.joint_attention_dim, Dh = c.attention_head_dim;
  const std::string d_why = fmt::format("D = num_attention_heads {} x attention_head_dim {} = {}",
                                        c.num_attention_heads, c.attention_head_dim, D);
  w.img_in = bind_linear(b, be, "img_in", D, c.in_channels, true,
                         d_why + ", in_channels " + std::to_string(c.in_channels), LinearOut::F32);
  w.txt_norm = bind_vector(b, be, "txt_norm.weight", J, WeightInit::Gain, fmt::format("joint_attention_dim {}", J));
  w.txt_in = bind_linear(b, be, "txt_in", D, J, true, d_why + fmt::format(", joint_attention_dim {}", J),
                         LinearOut::F32);
  w.time_linear_1 = bind_linear(b, be, "time_text_embed.timestep_embedder.linear_1", D, TransformerConfig::kTimeProjDim,
                                true, d_why + ", timestep projection 256");
  w.time_linear_2 = bind_linear(b, be, "time_text_embed.timestep_embedder.linear_2", D, D, true, d_why, LinearOut::F32);
  w.blocks.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    Block& k = w.blocks[static_cast<size_t>(i)];
    const std::string p = fmt::format("transformer_blocks.{}.", i);
    k.img_mod = bind_linear(b, be, p + "img_mod.1", 6 * D, D, true, d_why, LinearOut::F32);
    k.txt_mod = bind_linear(b, be, p + "txt_mod.1", 6 * D, D, true, d_why, LinearOut::F32);
    k.to_q = bind_linear(b, be, p + "attn.to_q", D, D, true, d_why);
    k.to_k = bind_linear(b, be, p + "attn.to_k", D, D, true, d_why);
    k.to_v = bind_linear(b, be, p + "attn.to_v", D, D, true, d_why);
    k.add_q_proj = bind_linear(b, be, p + "attn.add_q_proj", D, D, true, d_why);
    k.add_k_proj = bind_linear(b, be, p + "attn.add_k_proj", D, D, true, d_why);
    k.add_v_proj = bind_linear(b, be, p + "attn.add_v_proj", D, D, true, d_why);
    const std::string dh_why = fmt::format("attention_head_dim {}", Dh);
    k.norm_q = bind_vector(b, be, p + "attn.norm_q.weight", Dh, WeightInit::Gain, dh_why);
    k.norm_k = bind_vector(b, be, p + "attn.norm_k.weight", Dh, WeightInit::Gain, dh_why);
    k.norm_added_q = bind_vector(b, be, p + "attn.norm_added_q.weight", Dh, WeightInit::Gain, dh_why);
    k.norm_added_k = bind_vector(b, be, p + "attn.norm_added_k.weight", Dh, WeightInit::Gain, dh_why);
    k.to_out = bind_linear(b, be, p + "attn.to_out.0", D, D, true, d_why, LinearOut::F32);
    k.to_add_out = bind_linear(b, be, p + "attn.to_add_out", D, D, true, d_why, LinearOut::F32);
    const std::string f_why = d_why + fmt::format(", feed-forward 4 x D = {}", F);
    k.img_mlp_in = bind_linear(b, be, p + "img_mlp.net.0.proj", F, D, true, f_why);
    k.img_mlp_out = bind_linear(b, be, p + "img_mlp.net.2", D, F, true, f_why, LinearOut::F32);
    k.txt_mlp_in = bind_linear(b, be, p + "txt_mlp.net.0.proj", F, D, true, f_why);
    k.txt_mlp_out = bind_linear(b, be, p + "txt_mlp.net.2", D, F, true, f_why, LinearOut::F32);
    if (after_block) after_block(k);
  }
  w.norm_out_linear = bind_linear(b, be, "norm_out.linear", 2 * D, D, true, d_why, LinearOut::F32);
  w.proj_out = bind_linear(b, be, "proj_out", c.out_dim(), D, true,
                           d_why + fmt::format(", patch_size^2 x out_channels = {}", c.out_dim()), LinearOut::F32);
}

QwenImageTransformer::QwenImageTransformer(Backend& backend, const Component& component)
    : QwenImageTransformer(backend, TransformerConfig::from(component.config()), ComponentLoader(component)) {}

QwenImageTransformer::QwenImageTransformer(Backend& backend, const TransformerConfig& config, WeightBinder& binder) : be_(backend), config_(config) {
  bind(binder, &be_, config_, w_);
}

LoraTargets QwenImageTransformer::lora_targets(const TransformerConfig& config) {
  return {fmt::format("this Qwen-Image transformer ({} blocks, inner dim {})", config.num_layers, config.inner_dim()),
          config.num_layers, weight_specs(config)};
}

std::vector<WeightSpec> QwenImageTransformer::weight_specs(const TransformerConfig& config) {
  SpecRecorder recorder;
  Weights unused;
  bind(recorder, nullptr, config, unused);
  return recorder.specs;
}

std::vector<float> distinct_model_times(const std::vector<float>& times) {
  std::vector<float> out;
  std::set<uint32_t> seen;
  for (float tt : times)
    if (seen.insert(f32_bits(tt)).second) out.push_back(tt);
  return out;
}

QwenImageTransformer::QwenImageTransformer(Backend& backend, const TransformerConfig& config, WeightBinder& binder,
                                           const std::vector<float>& timesteps)
    : be_(backend), config_(config) {
  const std::vector<float> times = distinct_model_times(timesteps);
  const int64_t D = config_.inner_dim();
  std::vector<TimestepConditioning> conds(times.size());
  std::vector<Tensor> acts;  // silu(temb) [1, D] per model time
  Tensor zero_t_act;          // zero_cond_t: silu(temb) [1, D] of t = 0
  const bool zero_t = config_.zero_cond_t && !times.empty();
  bool embedded = false;
  bind(binder, &be_, config_, w_, [&](Block& block) {
    if (!embedded) {  // the time embedder is bound before the first block
      for (size_t n = 0; n < times.size(); ++n) {
        Tensor temb = time_embedding(times[n]);
        acts.push_back(be_.silu(temb));
        conds[n].temb = temb.view({D});
      }
      if (zero_t) zero_t_act = be_.silu(time_embedding(0.0f));
      embedded = true;
    }
    for (size_t n = 0; n < times.size(); ++n) append_modulation(block, acts[n], conds[n]);
    if (zero_t) append_zero_t_modulation(block, zero_t_act);
    block.img_mod = Linear{};  // released: the next block's load can reuse the memory
    block.txt_mod = Linear{};
  });
  for (size_t n = 0; n < times.size(); ++n) {
    conds[n].norm_out = w_.norm_out_linear(be_, acts[n], DType::F32).view({2, D});
    conds[n].img_mod_zero_t = img_mod_zero_t_;
    precomputed_.emplace(f32_bits(times[n]), std::move(conds[n]));
  }
  w_.time_linear_1 = w_.time_linear_2 = w_.norm_out_linear = Linear{};  // they only fed the conditioning
  conditioning_weights_resident_ = false;
}

int64_t QwenImageTransformer::conditioning_bytes(const TransformerConfig& c, int64_t timesteps) {
  // temb [D], img_mod and txt_mod [6, D] per block, norm_out [2, D]: f32; zero_cond_t's img_mod
  // at t = 0 once for all model times
  const int64_t zero_t = c.zero_cond_t && timesteps > 0 ? 6 * c.num_layers : 0;
  return (timesteps * (1 + 12 * c.num_layers + 2) + zero_t) * c.inner_dim() * 4;
}

int64_t QwenImageTransformer::conditioning_weight_bytes(const TransformerConfig& c, size_t weight_dtype_size) {
  const int64_t D = c.inner_dim(), T = TransformerConfig::kTimeProjDim;  // (f32 biases: 0.04 % more)
  const int64_t params = (D * T + D) + (D * D + D) + 2 * c.num_layers * (6 * D * D + 6 * D) + (2 * D * D + 2 * D);
  return params * static_cast<int64_t>(weight_dtype_size);  // time embedder, img_mod + txt_mod, norm_out.linear
}

bool QwenImageTransformer::conditioning_at_load_pays(const TransformerConfig& c, int64_t timesteps,
                                                     size_t weight_dtype_size) {
  return timesteps > 0 && 2 * conditioning_bytes(c, timesteps) <= conditioning_weight_bytes(c, weight_dtype_size);
}

Tensor QwenImageTransformer::time_embedding(float tt) {
  // Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0, scale=1000): every product is
  // a float32 op, exp/sin/cos as torch's SLEEF u10 kernels compute them (spec §4.4).
  constexpr int64_t half = TransformerConfig::kTimeProjDim / 2;
  const float neg_log_period = static_cast<float>(-std::log(10000.0));
  std::vector<float> proj(TransformerConfig::kTimeProjDim);
  for (int64_t k = 0; k < half; ++k) {
    const float exponent = (neg_log_period * static_cast<float>(k)) / static_cast<float>(half);
    const float freq = Sleef_expf_u10(exponent);
    const float arg = (tt * freq) * 1000.0f;
    proj[static_cast<size_t>(k)] = Sleef_cosf_u10(arg);
    proj[static_cast<size_t>(half + k)] = Sleef_sinf_u10(arg);
  }
  Tensor proj_dev = be_.upload(Tensor::host_f32({1, TransformerConfig::kTimeProjDim}, proj), be_.act_dtype());
  Tensor hidden = be_.silu(w_.time_linear_1(be_, proj_dev));
  return w_.time_linear_2(be_, hidden, DType::F32);  // [1, D]
}

void QwenImageTransformer::append_modulation(const Block& block, const Tensor& act, TimestepConditioning& cond) {
  const int64_t D = config_.inner_dim();
  cond.img_mod.push_back(block.img_mod(be_, act, DType::F32).view({6, D}));
  cond.txt_mod.push_back(block.txt_mod(be_, act, DType::F32).view({6, D}));
}

void QwenImageTransformer::append_zero_t_modulation(const Block& block, const Tensor& zero_t_act) {
  img_mod_zero_t_.push_back(block.img_mod(be_, zero_t_act, DType::F32).view({6, config_.inner_dim()}));
}

// diffusers' cat([timestep, timestep * 0]): row B + b of temb is t = 0, the same at every step.
const std::vector<Tensor>& QwenImageTransformer::img_mod_zero_t() {
  if (img_mod_zero_t_.empty()) {
    const Tensor zero_t_act = be_.silu(time_embedding(0.0f));
    for (const Block& block : w_.blocks) append_zero_t_modulation(block, zero_t_act);
  }
  return img_mod_zero_t_;
}

TimestepConditioning QwenImageTransformer::condition(float tt) {
  if (auto it = precomputed_.find(f32_bits(tt)); it != precomputed_.end()) return it->second;
  DITBATCH_CHECK(conditioning_weights_resident_,
                 "transformer: model time {} is not one the conditioning was computed for at load ({} were), and the "
                 "weights that compute it were released after it: the images given to load_denoiser() must include "
                 "every (size, steps) this process generates (a ditbatch bug when it comes from `generate`; "
                 "please report it with the prompt file)",
                 tt, precomputed_.size());
  const int64_t D = config_.inner_dim();
  TimestepConditioning cond;
  Tensor temb = time_embedding(tt);
  Tensor act = be_.silu(temb);
  for (const Block& block : w_.blocks) append_modulation(block, act, cond);
  cond.norm_out = w_.norm_out_linear(be_, act, DType::F32).view({2, D});
  cond.temb = temb.view({D});
  if (config_.zero_cond_t) cond.img_mod_zero_t = img_mod_zero_t();
  return cond;
}

QwenImageTransformer::RopeTables QwenImageTransformer::rope_tables(RopeKind kind,
                                                                   const std::vector<PackedGrid>& img_shapes,
                                                                   int64_t count) {
  const auto key = std::make_tuple(kind, img_shapes, count);
  if (auto it = rope_cache_.find(key); it != rope_cache_.end()) return it->second;
  if (rope_cache_.size() >= 32) rope_cache_.clear();  // many sizes in one run: keep memory bounded
  // QwenEmbedRope(theta 10000, axes_dims_rope, scale_rope=True), spec §4.5. Pair m of a head
  // belongs to the frame axis, then height, then width; each axis has its own frequencies.
  const int64_t half = config_.attention_head_dim / 2;
  std::vector<float> omega;
  std::vector<int> axis_of_pair;
  for (int axis = 0; axis < 3; ++axis) {
    const int64_t d = config_.axes_dims_rope[static_cast<size_t>(axis)];
    for (int64_t k = 0; k < d / 2; ++k) {
      const float exponent = static_cast<float>(2 * k) / static_cast<float>(d);
      omega.push_back(1.0f / std::pow(TransformerConfig::kRopeTheta, exponent));
      axis_of_pair.push_back(axis);
    }
  }
  auto fill = [&](int64_t tokens, auto position_of) {
    Tensor cos_t = Tensor::host({tokens, half}), sin_t = Tensor::host({tokens, half});
    for (int64_t t = 0; t < tokens; ++t) {
      const auto pos = position_of(t);
      for (int64_t m = 0; m < half; ++m) {
        // torch.polar: scalar glibc cosf/sinf of the float32 angle
        const float angle = static_cast<float>(pos[axis_of_pair[static_cast<size_t>(m)]]) * omega[static_cast<size_t>(m)];
        cos_t.data<float>()[t * half + m] = std::cos(angle);
        sin_t.data<float>()[t * half + m] = std::sin(angle);
      }
    }
    return RopeTables{be_.upload(cos_t, DType::F32), be_.upload(sin_t, DType::F32)};
  };
  RopeTables tables;
  if (kind == RopeKind::Image) {
    // Image k of img_shapes at frame k (0: the noise latents), its positions centred: rows
    // -ceil(h/2) .. floor(h/2)-1, likewise columns (_compute_video_freqs).
    std::vector<std::array<int64_t, 3>> positions;  // [S]: one sample's image stream
    for (size_t k = 0; k < img_shapes.size(); ++k) {
      const auto [h, w] = img_shapes[k];
      const int64_t h0 = (h + 1) / 2, w0 = (w + 1) / 2;
      for (int64_t token = 0; token < h * w; ++token)
        positions.push_back({static_cast<int64_t>(k), token / w - h0, token % w - w0});
    }
    const int64_t S = std::ssize(positions);
    tables = fill(count * S, [&](int64_t row) { return positions[static_cast<size_t>(row % S)]; });
  } else {
    // Text token j sits at P + j on all three axes, P = max(h/2, w/2) over every image.
    int64_t text_start = 0;
    for (const auto& [h, w] : img_shapes) text_start = std::max({text_start, h / 2, w / 2});
    tables = fill(count, [&](int64_t token) {
      return std::array<int64_t, 3>{text_start + token, text_start + token, text_start + token};
    });
  }
  return rope_cache_.emplace(key, tables).first->second;
}

Tensor QwenImageTransformer::forward(const Tensor& latents, const Tensor& text, int64_t text_valid,
                                     const std::vector<PackedGrid>& img_shapes, const TimestepConditioning& cond,
                                     const BlockHook& hook) {
  const Tensor v = forward_samples(latents, {{&text, text_valid}}, img_shapes, cond, hook);  // [S, 64]
  return v.slice0(0, img_shapes[0].tokens());                                              // [S0, 64]
}

std::pair<Tensor, Tensor> QwenImageTransformer::forward_cfg(const Tensor& latents, const Tensor& text,
                                                            int64_t text_valid, const Tensor& neg_text,
                                                            int64_t neg_valid, const std::vector<PackedGrid>& img_shapes,
                                                            const TimestepConditioning& cond) {
  const Tensor v = forward_samples(latents, {{&text, text_valid}, {&neg_text, neg_valid}}, img_shapes, cond,
                                   nullptr);  // [2S, 64]
  const int64_t S = v.dim(0) / 2, S0 = img_shapes[0].tokens();
  return {v.slice0(0, S0), v.slice0(S, S + S0)};  // [S0, 64] each
}

QwenImageTransformer::ImageVector QwenImageTransformer::ImageMod::chunk(int64_t k) const {
  const int64_t D = real.dim(1);
  auto row = [&](const Tensor& mod) { return mod.defined() ? mod.slice0(k, k + 1).view({D}) : Tensor(); };
  return {row(real), row(zero_t)};
}

namespace {

// The image stream's rows, modulated run by run and gathered into one stream [samples * per_sample,
// D]: per sample, op(begin, end, false) for the noise latents' rows (the real t), then op(begin,
// end, true) for the condition images' (t = 0). The Backend's ops take one vector for all rows.
template <typename Op>
Tensor modulate_runs(Backend& be, int64_t samples, int64_t per_sample, int64_t target, int64_t D, Op op) {
  Tensor out;
  for (int64_t b = 0; b < samples; ++b)
    for (const bool zero_t : {false, true}) {
      const int64_t begin = b * per_sample + (zero_t ? target : 0), end = zero_t ? (b + 1) * per_sample : begin + target;
      const Tensor part = op(begin, end, zero_t);  // [end - begin, D]
      if (!out.defined()) out = be.empty({samples * per_sample, D}, part.dtype());
      be.copy_(out.slice0(begin, end), part);
    }
  return out;
}

}  // namespace

const Tensor& QwenImageTransformer::ImageVector::rows(bool condition_rows) const {
  return condition_rows && zero_t.defined() ? zero_t : real;
}

Tensor QwenImageTransformer::image_layer_norm_modulate(Backend& be, const ImageRows& rows, const Tensor& x,
                                                       const ImageVector& shift, const ImageVector& scale,
                                                       float eps) {
  if (!rows.zero_t_conditions) return be.layer_norm_modulate(x, shift.real, scale.real, eps);
  return modulate_runs(be, rows.samples, rows.per_sample, rows.target, x.dim(1),
                       [&](int64_t begin, int64_t end, bool zero_t) {
                         return be.layer_norm_modulate(x.slice0(begin, end), shift.rows(zero_t), scale.rows(zero_t),
                                                       eps);
                       });
}

Tensor QwenImageTransformer::image_gated_add_layer_norm_modulate_(Backend& be, const ImageRows& rows, Tensor& x,
                                                                  const ImageVector& gate, const Tensor& y,
                                                                  const ImageVector& shift,
                                                                  const ImageVector& scale, float eps) {
  if (!rows.zero_t_conditions) return be.gated_add_layer_norm_modulate_(x, gate.real, y, shift.real, scale.real, eps);
  return modulate_runs(be, rows.samples, rows.per_sample, rows.target, x.dim(1),
                       [&](int64_t begin, int64_t end, bool zero_t) {
                         Tensor residual_rows = x.slice0(begin, end);  // a view: updated in place
                         return be.gated_add_layer_norm_modulate_(residual_rows, gate.rows(zero_t),
                                                                  y.slice0(begin, end), shift.rows(zero_t),
                                                                  scale.rows(zero_t), eps);
                       });
}

// Finite keys for a padded attention to mask: it still multiplies their V rows by 0.
const Tensor& QwenImageTransformer::spare_key_rows(int64_t rows) {
  if (!spare_keys_.defined() || spare_keys_.dim(0) != rows) {
    Tensor zeros = Tensor::host({rows, config_.inner_dim()}, DType::F32);
    std::fill_n(zeros.data<float>(), zeros.numel(), 0.0f);
    spare_keys_ = be_.upload(zeros, be_.act_dtype());
  }
  return spare_keys_;
}

Tensor QwenImageTransformer::forward_samples(const Tensor& latents, const std::vector<TextInput>& texts,
                                             const std::vector<PackedGrid>& img_shapes,
                                             const TimestepConditioning& cond, const BlockHook& hook) {
  const TransformerConfig& c = config_;
  const int64_t B = static_cast<int64_t>(texts.size()), D = c.inner_dim(), Dh = c.attention_head_dim;
  DITBATCH_CHECK(B == 1 || B == 2, "transformer: {} samples in one forward (1, or 2 for true CFG)", B);
  DITBATCH_CHECK(!img_shapes.empty(), "transformer: no image grid (img_shapes needs the noise latents' first)");
  std::string grids;  // "4x6, 5x3" for the messages
  int64_t S = 0;      // the image stream: the noise latents' S0 tokens, then the condition images'
  for (const PackedGrid& g : img_shapes) {
    DITBATCH_CHECK(g.h > 0 && g.w > 0, "transformer: image grid {}x{} is empty", g.h, g.w);
    grids += fmt::format("{}{}x{}", grids.empty() ? "" : ", ", g.h, g.w);
    S += g.tokens();
  }
  const int64_t S0 = img_shapes[0].tokens();
  DITBATCH_CHECK(latents.rank() == 2 && latents.dim(0) == S && latents.dim(1) == c.in_channels,
                 "transformer: latents {} for the image grids {} (expected [{}, {}])", latents.describe(), grids, S,
                 c.in_channels);
  std::array<int64_t, 2> L{}, Lv{};  // per sample: text tokens, of which the first Lv are real
  for (int64_t b = 0; b < B; ++b) {
    const Tensor& text = *texts[static_cast<size_t>(b)].embeds;
    const int64_t valid = texts[static_cast<size_t>(b)].valid;
    DITBATCH_CHECK(text.rank() == 2 && text.dim(1) == c.joint_attention_dim && 0 < valid && valid <= text.dim(0),
                   "transformer: text {} with {} valid tokens (expected [L, {}])", text.describe(), valid,
                   c.joint_attention_dim);
    L[b] = text.dim(0);
    Lv[b] = valid;
  }
  DITBATCH_CHECK(cond.img_mod.size() == w_.blocks.size(), "transformer: conditioning for {} blocks, model has {}",
                 cond.img_mod.size(), w_.blocks.size());
  DITBATCH_CHECK(cond.img_mod_zero_t.size() == (c.zero_cond_t ? w_.blocks.size() : 0),
                 "transformer: conditioning with {} t = 0 modulations for a model with zero_cond_t {} and {} blocks",
                 cond.img_mod_zero_t.size(), c.zero_cond_t, w_.blocks.size());
  // 4096 positions each side of 0 in diffusers' tables; larger grids would index past them.
  const int64_t L_max = std::max(L[0], L[1]);
  int64_t text_start = 0, half_extent = 0;
  for (const auto& [h, w] : img_shapes) {
    text_start = std::max({text_start, h / 2, w / 2});
    half_extent = std::max({half_extent, (h + 1) / 2, (w + 1) / 2});
  }
  if (text_start + L_max > 4096 || half_extent > 4096 || std::ssize(img_shapes) > 4096)
    fail_input("image grids {} with {} text tokens exceed the 4096 RoPE positions of Qwen-Image", grids, L_max);
  const size_t n_blocks = w_.blocks.size();
  DITBATCH_CHECK(n_blocks > 0, "transformer: no blocks (num_layers must be at least 1)");

  const JointRows rows(B, S, L, Lv, be_.attention_spare_rows());
  const ImageRows image_rows{B, S, S0, c.zero_cond_t && S0 < S};
  const RopeTables img_rope = rope_tables(RopeKind::Image, img_shapes, B);  // [B * S, Dh/2]
  std::array<RopeTables, 2> txt_rope;
  for (int64_t b = 0; b < B; ++b) txt_rope[b] = rope_tables(RopeKind::Text, img_shapes, L[b]);
  const JointContext joint{rows, image_rows, img_rope, txt_rope,
                           static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh))),
                           rows.spare > 0 ? &spare_key_rows(rows.spare) : nullptr};

  Streams residual;
  residual.image = w_.img_in(be_, latents, DType::F32);  // [S, D], f32
  Tensor text_all = *texts[0].embeds;                    // [L_all, J]
  if (B == 2) {
    Tensor both = be_.empty({B * S, D}, DType::F32);  // [2S, D]: both samples start from the same latents
    be_.copy_(both.slice0(0, S), residual.image);
    be_.copy_(both.slice0(S, 2 * S), residual.image);
    residual.image = both;
    text_all = be_.empty({rows.text_rows, c.joint_attention_dim}, texts[0].embeds->dtype());
    for (int64_t b = 0; b < B; ++b)
      be_.copy_(text_all.slice0(rows.text_row[b], rows.text_row[b] + L[b]), *texts[static_cast<size_t>(b)].embeds);
  }
  residual.text = w_.txt_in(be_, be_.rms_norm(text_all, w_.txt_norm, c.eps), DType::F32);  // [L_all, D]

  auto chunk = [D](const Tensor& mod, int64_t k) { return mod.slice0(k, k + 1).view({D}); };
  // zero_cond_t's per-row choice (modulate_index) only where there are condition rows to choose.
  auto img_mod = [&](size_t i) {
    return ImageMod{cond.img_mod[i], image_rows.zero_t_conditions ? cond.img_mod_zero_t[i] : Tensor()};
  };
  // The first block's img_norm1/txt_norm1 + mod1; each later one's is made by the seam before it.
  Streams modulated{
      image_layer_norm_modulate(be_, image_rows, residual.image, img_mod(0).chunk(0), img_mod(0).chunk(1), c.eps),
      be_.layer_norm_modulate(residual.text, chunk(cond.txt_mod[0], 0), chunk(cond.txt_mod[0], 1), c.eps)};
  for (size_t i = 0; i < n_blocks; ++i) {
    Seam next;
    if (i + 1 < n_blocks) {
      next = {img_mod(i + 1).chunk(0), img_mod(i + 1).chunk(1),
              std::pair{chunk(cond.txt_mod[i + 1], 0), chunk(cond.txt_mod[i + 1], 1)}};
    } else {  // norm_out at the real t for every row: AdaLayerNormContinuous, with scale as the FIRST chunk
      next = {{cond.norm_out.slice0(1, 2).view({D})}, {cond.norm_out.slice0(0, 1).view({D})}, std::nullopt};
    }
    modulated = w_.blocks[i].forward(be_, c, residual, modulated, img_mod(i), cond.txt_mod[i], joint, next);
    if (hook) hook(static_cast<int64_t>(i), residual.text, residual.image);
  }
  return w_.proj_out(be_, modulated.image, DType::F32);  // [B*S, 64]: diffusers' output, of which v[:, :S0] is kept
}

QwenImageTransformer::Streams QwenImageTransformer::Block::forward(Backend& be, const TransformerConfig& c,
                                                                   Streams& residual, const Streams& modulated,
                                                                   const ImageMod& img_mod_params,
                                                                   const Tensor& txt_mod_params,
                                                                   const JointContext& joint, const Seam& next) const {
  const int64_t D = c.inner_dim();
  auto chunk = [D](const Tensor& mod, int64_t k) { return mod.slice0(k, k + 1).view({D}); };
  const ImageMod& im = img_mod_params;
  const Tensor& tm = txt_mod_params;
  const ImageRows& rows = joint.image_rows;
  const Streams attn = attention(be, c, modulated, joint);
  // hidden_states += gate1 * attn, then img_norm2 + mod2: one pass over each residual stream.
  const Streams ff_in{
      image_gated_add_layer_norm_modulate_(be, rows, residual.image, im.chunk(2), attn.image, im.chunk(3),
                                           im.chunk(4), c.eps),
      be.gated_add_layer_norm_modulate_(residual.text, chunk(tm, 2), attn.text, chunk(tm, 3), chunk(tm, 4), c.eps)};
  const Streams ff = feed_forward(be, ff_in);
  // hidden_states += gate2 * mlp, and across the seam the next LayerNorm + modulation, in the
  // same pass.
  Streams out;
  out.image = image_gated_add_layer_norm_modulate_(be, rows, residual.image, im.chunk(5), ff.image, next.image_shift,
                                                   next.image_scale, c.eps);
  if (next.text)
    out.text = be.gated_add_layer_norm_modulate_(residual.text, chunk(tm, 5), ff.text, next.text->first,
                                                 next.text->second, c.eps);
  else
    be.gated_add_(residual.text, chunk(tm, 5), ff.text);
  return out;
}

QwenImageTransformer::Streams QwenImageTransformer::Block::attention(Backend& be, const TransformerConfig& c,
                                                                     const Streams& modulated,
                                                                     const JointContext& joint) const {
  const JointRows& r = joint.rows;
  const int64_t D = c.inner_dim(), H = c.num_attention_heads, Dh = c.attention_head_dim;
  // Per-head RMSNorm + RoPE written straight into the joint Q and K, V projected straight into
  // the joint V.
  Tensor q = be.empty({r.q_rows + r.spare, D}, be.act_dtype());   // [L_all + B*S + spare, D]
  Tensor k = be.empty({r.kv_rows + r.spare, D}, be.act_dtype());  // [Lv_all + B*S + spare, D]
  Tensor v = be.empty({r.kv_rows + r.spare, D}, be.act_dtype());
  if (r.spare > 0) {
    be.copy_(k.slice0(r.kv_rows, r.kv_rows + r.spare), *joint.spare_keys);
    be.copy_(v.slice0(r.kv_rows, r.kv_rows + r.spare), *joint.spare_keys);
  }
  const Tensor text_q = add_q_proj(be, modulated.text);  // [L_all, D]
  const Tensor text_k = add_k_proj(be, modulated.text);
  for (int64_t b = 0; b < r.samples; ++b) {
    const RopeTables& rope = joint.text_rope[b];
    const int64_t row = r.text_row[b];
    be.rms_norm_rope(text_q.slice0(row, row + r.text[b]), norm_added_q, rope.cos, rope.sin, c.eps,
                     q.slice0(r.q_text[b], r.q_text[b] + r.text[b]));
    be.rms_norm_rope(text_k.slice0(row, row + r.valid[b]), norm_added_k, rope.cos.slice0(0, r.valid[b]),
                     rope.sin.slice0(0, r.valid[b]), c.eps, k.slice0(r.kv_text[b], r.kv_text[b] + r.valid[b]));
    add_v_proj.into(be, v.slice0(r.kv_text[b], r.kv_text[b] + r.valid[b]), modulated.text.slice0(row, row + r.valid[b]));
  }
  const RopeTables& image_rope = joint.image_rope;
  const int64_t image_rows = r.samples * r.image;  // both samples' image rows, adjacent
  be.rms_norm_rope(to_q(be, modulated.image), norm_q, image_rope.cos, image_rope.sin, c.eps,
                   q.slice0(r.q_image, r.q_image + image_rows));
  be.rms_norm_rope(to_k(be, modulated.image), norm_k, image_rope.cos, image_rope.sin, c.eps,
                   k.slice0(r.kv_image, r.kv_image + image_rows));
  to_v.into(be, v.slice0(r.kv_image, r.kv_image + image_rows), modulated.image);

  // The attention output is laid out as Q: the image rows of both samples stay adjacent.
  // Sample 1 goes last: sample 0's spare rows are its rows (joint_rows.h).
  Tensor o = be.empty({r.q_rows + r.spare, D}, be.act_dtype());  // [L_all + B*S + spare, D]
  for (int64_t b = 0; b < r.samples; ++b) {
    const int64_t lq = r.q_length(b), lk = r.kv_length(b);
    be.attention(q.slice0(r.q_start[b], r.q_start[b] + lq).view({lq, H, Dh}),
                 k.slice0(r.kv_start[b], r.kv_start[b] + lk).view({lk, H, Dh}),
                 v.slice0(r.kv_start[b], r.kv_start[b] + lk).view({lk, H, Dh}), joint.scale, false,
                 o.slice0(r.q_start[b], r.q_start[b] + lq).view({lq, H, Dh}), r.spare);
  }
  Streams out;
  out.image = to_out(be, o.slice0(r.q_image, r.q_image + image_rows), DType::F32);  // [B*S, D]
  out.text = be.empty({r.text_rows, D}, DType::F32);                                         // [L_all, D]
  for (int64_t b = 0; b < r.samples; ++b)
    to_add_out.into(be, out.text.slice0(r.text_row[b], r.text_row[b] + r.text[b]),
                    o.slice0(r.q_text[b], r.q_text[b] + r.text[b]));
  return out;
}

QwenImageTransformer::Streams QwenImageTransformer::Block::feed_forward(Backend& be, const Streams& modulated) const {
  return {img_mlp_out(be, img_mlp_in.gelu(be, modulated.image), DType::F32),   // [B*S, D]
          txt_mlp_out(be, txt_mlp_in.gelu(be, modulated.text), DType::F32)};  // [L_all, D]
}

double QwenImageTransformer::forward_flops(const TransformerConfig& c, int64_t S, int64_t L) {
  const double D = static_cast<double>(c.inner_dim()), F = static_cast<double>(c.ff_dim());
  const double tokens = static_cast<double>(S + L);
  const double per_block = 2.0 * tokens * (4.0 * D * D + 2.0 * D * F)  // q, k, v, out and the MLP, both streams
                           + 2.0 * 2.0 * tokens * tokens * D;           // QK^T and PV over all heads
  return static_cast<double>(c.num_layers) * per_block +
         2.0 * (static_cast<double>(S) * static_cast<double>(c.in_channels) * D +
                static_cast<double>(L) * static_cast<double>(c.joint_attention_dim) * D +
                static_cast<double>(S) * D * static_cast<double>(c.out_dim()));
}

}  // namespace ditbatch
