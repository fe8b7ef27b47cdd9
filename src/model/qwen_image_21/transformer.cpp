#include "model/qwen_image_21/transformer.h"

#include <sleef.h>

#include <array>
#include <cmath>
#include <tuple>

#include "core/error.h"

namespace ditbatch {

Transformer21Config Transformer21Config::from(const Config& comp) {
  Transformer21Config c;
  if (comp.has("patch_size") && comp.get_int("patch_size") != 1)
    fail_input("{}: patch_size {}: Qwen-Image-2.1's transformer reads latents unpatched (patch_size 1)", comp.where(),
               comp.get_int("patch_size"));
  if (comp.has("causal_condition") && !comp.get_bool("causal_condition"))
    fail_input("{}: causal_condition false is not implemented (the text's K/V cache needs it)", comp.where());
  c.in_channels = comp.get_int("in_channels", 1, kMaxConfigWidth);
  c.out_channels = comp.has("out_channels") && !comp.json()["out_channels"].is_null()
                       ? comp.get_int("out_channels", 1, kMaxConfigWidth)
                       : c.in_channels;
  c.num_layers = comp.get_int("num_layers", 0, kMaxConfigDepth);
  c.attention_head_dim = comp.get_int("attention_head_dim", 2, kMaxConfigWidth);
  c.num_attention_heads = comp.get_int("num_attention_heads", 1, kMaxConfigWidth);
  c.context_in_dim = comp.get_int("context_in_dim", 1, kMaxConfigWidth);
  c.mlp_ratio = comp.get_int("mlp_ratio", 1, 64);
  c.eps = comp.get_double("eps");
  if (c.num_attention_heads * c.attention_head_dim > kMaxConfigWidth)
    fail_input("{}: num_attention_heads {} x attention_head_dim {} is past {}", comp.where(), c.num_attention_heads,
               c.attention_head_dim, kMaxConfigWidth);
  c.axes_dims_rope = comp.get_ints("axes_dims_rope");
  int64_t axes_sum = 0;
  for (int64_t d : c.axes_dims_rope) {
    if (d <= 0 || d % 2 != 0 || d > kMaxConfigWidth)
      fail_input("{}: axes_dims_rope entries must be positive and even (and at most {})", comp.where(), kMaxConfigWidth);
    axes_sum += d;
  }
  if (c.axes_dims_rope.size() != 3 || axes_sum != c.attention_head_dim)
    fail_input("{}: axes_dims_rope {} must be 3 axes summing to attention_head_dim {}", comp.where(),
               shape_str(c.axes_dims_rope), c.attention_head_dim);
  return c;
}

void QwenImage21Transformer::bind(WeightBinder& b, Backend* be, const Transformer21Config& c, Weights& w) {
  const int64_t D = c.inner_dim(), F = c.ff_dim(), Dh = c.attention_head_dim;
  const std::string why = fmt::format("num_attention_heads {} x attention_head_dim {} = inner {}, in_channels {}, "
                                      "context_in_dim {}, mlp_ratio {}",
                                      c.num_attention_heads, Dh, D, c.in_channels, c.context_in_dim, c.mlp_ratio);
  w.img_in = bind_linear(b, be, "img_in", D, c.in_channels, false, why, LinearOut::F32);
  const Tensor text_norm = b.bind("txt_in.text_norm.weight", {c.context_in_dim}, WeightInit::Bias, why);
  if (be && text_norm.defined()) {
    // Stored zero-centred: the gain is w + 1, worked out in f32 (diffusers' w.float() + 1) and kept in f32.
    Tensor gain = text_norm.to_f32();
    for (int64_t i = 0; i < gain.numel(); ++i) gain.data<float>()[i] += 1.0f;
    w.txt_norm = be->upload(gain, DType::F32);
  }
  w.txt_in_layer = bind_linear(b, be, "txt_in.in_layer", D, c.context_in_dim, false, why);
  w.txt_out_layer = bind_linear(b, be, "txt_in.out_layer", D, D, false, why, LinearOut::F32);
  w.time_linear_1 = bind_linear(b, be, "time_text_embed.timestep_embedder.linear_1", D,
                                Transformer21Config::kTimeProjDim, false, why);
  w.time_linear_2 = bind_linear(b, be, "time_text_embed.timestep_embedder.linear_2", D, D, false, why, LinearOut::F32);
  w.modulation = bind_linear(b, be, "modulation.1", 4 * D, D, false, why, LinearOut::F32);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = fmt::format("transformer_blocks.{}.", i);
    Block k;
    k.to_q = bind_linear(b, be, p + "attn.to_q", D, D, false, why);
    k.to_k = bind_linear(b, be, p + "attn.to_k", D, D, false, why);
    k.to_v = bind_linear(b, be, p + "attn.to_v", D, D, false, why);
    k.to_out = bind_linear(b, be, p + "attn.to_out.0", D, D, false, why, LinearOut::F32);
    k.norm_q = bind_vector(b, be, p + "attn.norm_q.weight", Dh, WeightInit::Gain, why);
    k.norm_k = bind_vector(b, be, p + "attn.norm_k.weight", Dh, WeightInit::Gain, why);
    k.proj = bind_linear(b, be, p + "img_mlp.proj", F, D, false, why);
    k.gate_layer = bind_linear(b, be, p + "img_mlp.gate_layer", F, D, false, why);
    k.out = bind_linear(b, be, p + "img_mlp.out", D, F, false, why, LinearOut::F32);
    w.blocks.push_back(std::move(k));
  }
  w.norm_out_linear = bind_linear(b, be, "norm_out.linear", D, D, false, why, LinearOut::F32);
  w.proj_out = bind_linear(b, be, "proj_out", c.out_channels, D, false, why, LinearOut::F32);
}

QwenImage21Transformer::QwenImage21Transformer(Backend& backend, const Transformer21Config& config,
                                               WeightBinder& binder)
    : be_(backend), config_(config) {
  bind(binder, &be_, config_, w_);
  zero_shift_ = be_.upload(Tensor::host_f32({config_.inner_dim()}, std::vector<float>(config_.inner_dim(), 0.0f)),
                           DType::F32);
}

LoraTargets QwenImage21Transformer::lora_targets(const Transformer21Config& config) {
  return {fmt::format("this Qwen-Image-2.1 transformer ({} blocks, inner dim {})", config.num_layers, config.inner_dim()),
          config.num_layers, weight_specs(config)};
}

double QwenImage21Transformer::forward_flops(const Transformer21Config& c, int64_t S, int64_t L, bool cached) {
  const double D = static_cast<double>(c.inner_dim()), F = static_cast<double>(c.ff_dim());
  const double rows = static_cast<double>(cached ? S : S + L), keys = static_cast<double>(S + L);
  const double per_block = 2.0 * rows * (4.0 * D * D + 3.0 * D * F)  // q, k, v, out; the gated MLP's three
                           + 2.0 * 2.0 * rows * keys * D;            // QK^T and PV over all heads
  const double text_in = cached ? 0.0 : 2.0 * static_cast<double>(L) * (static_cast<double>(c.context_in_dim) + D) * D;
  return static_cast<double>(c.num_layers) * per_block + text_in +
         2.0 * static_cast<double>(S) * D * static_cast<double>(c.in_channels + c.out_channels);
}

std::vector<WeightSpec> QwenImage21Transformer::weight_specs(const Transformer21Config& config) {
  SpecRecorder recorder;
  Weights unused;
  bind(recorder, nullptr, config, unused);
  return recorder.specs;
}

QwenImage21Transformer::Modulation QwenImage21Transformer::modulation(float tt) {
  // QwenImage21TemporalTimesteps(256): freq_k = exp(f32(-ln 1e4) * k / 128) and the argument
  // f32(f32(1000 * t) * freq_k), cos first; exp, cos and sin as torch's SLEEF u10 kernels.
  // (Qwen-Image rounds f32(t * freq) * 1000 instead.)
  constexpr int64_t half = Transformer21Config::kTimeProjDim / 2;
  const float neg_log_period = static_cast<float>(-std::log(10000.0));
  const float scaled = 1000.0f * tt;
  std::vector<float> proj(Transformer21Config::kTimeProjDim);
  for (int64_t k = 0; k < half; ++k) {
    const float freq = Sleef_expf_u10((neg_log_period * static_cast<float>(k)) / static_cast<float>(half));
    const float arg = scaled * freq;
    proj[static_cast<size_t>(k)] = Sleef_cosf_u10(arg);
    proj[static_cast<size_t>(half + k)] = Sleef_sinf_u10(arg);
  }
  const int64_t D = config_.inner_dim();
  Tensor proj_dev = be_.upload(Tensor::host_f32({1, Transformer21Config::kTimeProjDim}, proj), be_.act_dtype());
  Tensor temb = w_.time_linear_2(be_, be_.silu(w_.time_linear_1(be_, proj_dev)), DType::F32);  // [1, D]
  Tensor act = be_.silu(temb);
  // One table for every block: [scale1 | gate1 | scale2 | gate2]; the gates go through tanh.
  Tensor table = be_.to_host_f32(w_.modulation(be_, act, DType::F32));  // [1, 4D]
  auto part = [&](int64_t i, bool tanh) {
    std::vector<float> v(table.data<float>() + i * D, table.data<float>() + (i + 1) * D);
    if (tanh)
      for (float& g : v) g = Sleef_tanhf_u10(g);
    return be_.upload(Tensor::host_f32({D}, v), DType::F32);
  };
  Modulation m;
  m.scale1 = part(0, false);
  m.gate1 = part(1, true);
  m.scale2 = part(2, false);
  m.gate2 = part(3, true);
  m.scale_out = w_.norm_out_linear(be_, act, DType::F32).view({D});  // the final norm: a scale only
  return m;
}

std::pair<Tensor, Tensor> QwenImage21Transformer::rope_tables(int64_t L, int64_t h, int64_t w) {
  // QwenImage21Rope(theta 10000, axes_dims_rope): pair m of a head belongs to the frame axis,
  // then height, then width, each with its own frequencies; polar(1, p * omega) in f32.
  const int64_t half = config_.attention_head_dim / 2, S = h * w, N = L + S;
  std::vector<float> omega;
  std::vector<int> axis_of_pair;
  for (int axis = 0; axis < 3; ++axis) {
    const int64_t d = config_.axes_dims_rope[static_cast<size_t>(axis)];
    for (int64_t k = 0; k < d / 2; ++k) {
      omega.push_back(1.0f / std::pow(Transformer21Config::kRopeTheta, static_cast<float>(2 * k) / static_cast<float>(d)));
      axis_of_pair.push_back(axis);
    }
  }
  Tensor cos_t = Tensor::host({N, half}), sin_t = Tensor::host({N, half});
  for (int64_t t = 0; t < N; ++t) {
    std::array<int64_t, 3> pos{t, t, t};  // text token j at (j, j, j)
    if (t >= L) {  // the image: frame L, rows -ceil(h/2) .. floor(h/2)-1, likewise columns
      const int64_t token = t - L;
      pos = {L, token / w - (h - h / 2), token % w - (w - w / 2)};
    }
    for (int64_t m = 0; m < half; ++m) {
      // torch.polar: scalar glibc cosf/sinf of the float32 angle
      const float angle = static_cast<float>(pos[static_cast<size_t>(axis_of_pair[static_cast<size_t>(m)])]) *
                          omega[static_cast<size_t>(m)];
      cos_t.data<float>()[t * half + m] = std::cos(angle);
      sin_t.data<float>()[t * half + m] = std::sin(angle);
    }
  }
  return {be_.upload(cos_t, DType::F32), be_.upload(sin_t, DType::F32)};
}

void QwenImage21Transformer::block_forward(const Block& block, Tensor& x, const std::vector<Rows>& groups,
                                           const Tensor& cos, const Tensor& sin, Tensor& k_all, Tensor& v_all,
                                           int64_t row0) {
  const Transformer21Config& c = config_;
  const int64_t H = c.num_attention_heads, Dh = c.attention_head_dim, D = c.inner_dim();
  const float eps = static_cast<float>(c.eps), scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));
  const int64_t rows = x.dim(0);
  // a = Attn(LN(x) * (1 + scale1)): each group with its own modulation row, into one Q and the
  // K/V buffers (joint rows row0 + i).
  Tensor q = be_.empty({rows, D}, be_.act_dtype());
  for (const Rows& g : groups) {
    const Tensor h = be_.layer_norm_modulate(x.slice0(g.begin, g.end), zero_shift_, g.mod->scale1, eps);
    const int64_t j0 = row0 + g.begin, j1 = row0 + g.end;
    be_.rms_norm_rope(block.to_q(be_, h), block.norm_q, cos.slice0(j0, j1), sin.slice0(j0, j1), eps,
                      q.slice0(g.begin, g.end));
    be_.rms_norm_rope(block.to_k(be_, h), block.norm_k, cos.slice0(j0, j1), sin.slice0(j0, j1), eps,
                      k_all.slice0(j0, j1).view({j1 - j0, D}));
    block.to_v.into(be_, v_all.slice0(j0, j1).view({j1 - j0, D}), h);
  }
  // Block-causal attention: the text (joint rows [0, L)) causal over itself; the image over
  // every key before it and its own block, that is all of them.
  const Tensor q3 = q.view({rows, H, Dh});
  Tensor o = be_.empty({rows, H, Dh}, be_.act_dtype());
  for (const Rows& g : groups) {
    const int64_t keys = g.text ? row0 + g.end : k_all.dim(0);
    be_.attention(q3.slice0(g.begin, g.end), k_all.slice0(0, keys), v_all.slice0(0, keys), scale, g.text,
                  o.slice0(g.begin, g.end));
  }
  const Tensor attn = block.to_out(be_, o.view({rows, D}), DType::F32);
  for (const Rows& g : groups) {  // x += tanh(gate1) * a
    Tensor xg = x.slice0(g.begin, g.end);
    be_.gated_add_(xg, g.mod->gate1, attn.slice0(g.begin, g.end));
  }
  // x += tanh(gate2) * out(SiLU(gate_layer(m)) * proj(m)), m = LN(x) * (1 + scale2)
  for (const Rows& g : groups) {
    const Tensor m = be_.layer_norm_modulate(x.slice0(g.begin, g.end), zero_shift_, g.mod->scale2, eps);
    const Tensor mlp = block.out(be_, be_.silu_mul(block.gate_layer(be_, m), block.proj(be_, m)), DType::F32);
    Tensor xg = x.slice0(g.begin, g.end);
    be_.gated_add_(xg, g.mod->gate2, mlp);
  }
}

Tensor QwenImage21Transformer::forward(const Tensor& latents, const Tensor* text, float tt, int64_t h, int64_t w,
                                       Transformer21Cache& cache, const BlockHook& hook) {
  const Transformer21Config& c = config_;
  const int64_t S = h * w, D = c.inner_dim(), H = c.num_attention_heads, Dh = c.attention_head_dim;
  if (latents.rank() != 2 || latents.dim(0) != S || latents.dim(1) != c.in_channels)
    fail("transformer 2.1: latents {} for a {}x{} latent grid: expected [{}, {}]", shape_str(latents.shape()), h, w, S,
         c.in_channels);
  if (!text && !(cache.filled() && cache.image_tokens == S))
    fail("transformer 2.1: a cached step needs the cache of a first step at this size ({} image tokens; the cache "
         "has {})",
         S, cache.image_tokens);
  if (text && (text->rank() != 2 || text->dim(1) != c.context_in_dim || text->dim(0) < 1))
    fail("transformer 2.1: prompt embeddings {}: expected [L >= 1, {}]", shape_str(text->shape()), c.context_in_dim);
  const int64_t L = text ? text->dim(0) : cache.text_tokens, N = L + S;
  const float eps = static_cast<float>(c.eps);

  const Modulation image_mod = modulation(tt);
  Tensor x;  // the residual stream (f32) of the rows this step computes: joint rows row0 ..
  int64_t row0 = 0;
  std::vector<Rows> groups;
  if (text) {
    // Text rows: txt_in = out_layer(GELU_tanh(in_layer(RMSNorm_{w+1}(embeds)))), modulated from t = 0.
    if (!text_modulation_.scale1.defined()) text_modulation_ = modulation(0.0f);
    x = be_.empty({N, D}, DType::F32);
    const Tensor normed = be_.rms_norm(*text, w_.txt_norm, eps);
    w_.txt_out_layer.into(be_, x.slice0(0, L), be_.gelu_tanh(w_.txt_in_layer(be_, normed)));
    w_.img_in.into(be_, x.slice0(L, N), latents);
    groups = {{0, L, &text_modulation_, true}, {L, N, &image_mod, false}};
    cache = Transformer21Cache{};
    cache.text_tokens = L;
    cache.image_tokens = S;
    std::tie(cache.rope_cos, cache.rope_sin) = rope_tables(L, h, w);
    for (int64_t i = 0; i < c.num_layers; ++i) {
      cache.k.push_back(be_.empty({N, H, Dh}, be_.act_dtype()));
      cache.v.push_back(be_.empty({N, H, Dh}, be_.act_dtype()));
    }
  } else {
    x = w_.img_in(be_, latents, DType::F32);  // [S, D]
    row0 = L;
    groups = {{0, S, &image_mod, false}};
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    block_forward(w_.blocks[static_cast<size_t>(i)], x, groups, cache.rope_cos, cache.rope_sin,
                  cache.k[static_cast<size_t>(i)], cache.v[static_cast<size_t>(i)], row0);
    if (hook) hook(i, x);
  }
  // The final norm (a scale only, from the image's row) and proj_out, on the image rows.
  const Tensor image = text ? x.slice0(L, N) : x;
  const Tensor normed = be_.layer_norm_modulate(image, zero_shift_, image_mod.scale_out, eps);
  return w_.proj_out(be_, normed, DType::F32);  // [S, out_channels]
}

}  // namespace ditbatch
