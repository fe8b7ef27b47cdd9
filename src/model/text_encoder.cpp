#include "model/text_encoder.h"

#include <sleef.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/timer.h"

namespace ditbatch {

TextEncoderConfig TextEncoderConfig::from(const Config& comp) {
  auto key = [&](const std::string& name) {
    return comp.has("text_config." + name) ? "text_config." + name : name;
  };
  TextEncoderConfig c;
  c.hidden_size = comp.get_int(key("hidden_size"), 1, kMaxConfigWidth);
  c.num_hidden_layers = comp.get_int(key("num_hidden_layers"), 0, kMaxConfigDepth);
  c.num_attention_heads = comp.get_int(key("num_attention_heads"), 1, kMaxConfigWidth);
  c.num_key_value_heads = comp.get_int(key("num_key_value_heads"), 1, kMaxConfigWidth);
  c.intermediate_size = comp.get_int(key("intermediate_size"), 1, kMaxConfigWidth);
  c.vocab_size = comp.get_int(key("vocab_size"), 1, kMaxConfigVocab);
  c.rms_norm_eps = comp.get_double(key("rms_norm_eps"));
  c.head_dim = comp.has(key("head_dim")) ? comp.get_int(key("head_dim"), 1, kMaxConfigWidth)
                                         : c.hidden_size / c.num_attention_heads;
  if (c.num_attention_heads * c.head_dim > kMaxConfigWidth)  // both <= 2^20: no overflow
    fail_input("{}: num_attention_heads {} x head_dim {} is past {}", comp.where(), c.num_attention_heads, c.head_dim,
               kMaxConfigWidth);
  if (comp.has(key("rope_parameters.rope_theta")))
    c.rope_theta = comp.get_double(key("rope_parameters.rope_theta"));
  else
    c.rope_theta = comp.get_double(key("rope_theta"));
  if (c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 ||
      c.num_attention_heads % c.num_key_value_heads != 0 || c.head_dim % 2 != 0)
    fail_input("{}: num_attention_heads {} must be a multiple of num_key_value_heads {}, head_dim {} even",
               comp.where(), c.num_attention_heads, c.num_key_value_heads, c.head_dim);
  for (const char* rope : {"rope_parameters.", "rope_scaling."}) {
    const std::string section = key(std::string(rope) + "mrope_section");
    if (!comp.has(section)) continue;
    c.mrope_section = comp.get_ints(section);
    const int64_t half = c.head_dim / 2;
    const bool in_range = std::all_of(c.mrope_section.begin(), c.mrope_section.end(),
                                      [&](int64_t s) { return s >= 0 && s <= half; });
    if (c.mrope_section.size() != 3 || !in_range ||
        c.mrope_section[0] + c.mrope_section[1] + c.mrope_section[2] != half)
      fail_input("{}: {} must be three sections (temporal, height, width) adding up to head_dim / 2 = {}",
                 comp.where(), section, c.head_dim / 2);
    const std::string interleaved = key(std::string(rope) + "mrope_interleaved");
    c.mrope_interleaved = comp.has(interleaved) && comp.get_bool(interleaved);
    break;
  }
  if (comp.has("image_token_id")) c.image_token_id = comp.get_int("image_token_id", 0, kMaxConfigVocab);
  if (comp.has(key("use_sliding_window")) && comp.get_bool(key("use_sliding_window")))
    fail_input("{}: use_sliding_window = true is not supported", comp.where());
  const std::string model_type = comp.has("model_type") ? comp.get_string("model_type") : "";
  if (model_type.rfind("qwen3", 0) == 0) {
    c.qk_norm = true;
    c.qkv_bias = c.o_bias = comp.has(key("attention_bias")) && comp.get_bool(key("attention_bias"));
    c.mrope_interleaved = true;  // Qwen3-VL's text rotary embedding always interleaves
  }
  return c;
}

void QwenTextEncoder::bind(WeightBinder& b, Backend* be, const TextEncoderConfig& c, Weights& w) {
  const int64_t H = c.hidden_size, q_dim = c.num_attention_heads * c.head_dim, kv_dim = c.num_key_value_heads * c.head_dim;
  const std::string why = fmt::format("hidden_size {}, heads {} x head_dim {}, kv heads {}, intermediate_size {}",
                                      H, c.num_attention_heads, c.head_dim, c.num_key_value_heads, c.intermediate_size);
  w.embed_tokens = upload_bound(be, b.bind("embed_tokens.weight", {c.vocab_size, H}, WeightInit::Embedding,
                                           fmt::format("vocab_size {}, hidden_size {}", c.vocab_size, H)));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = fmt::format("layers.{}.", i);
    Layer l;
    l.input_layernorm = bind_vector(b, be, p + "input_layernorm.weight", H, WeightInit::Gain, why);
    l.q_proj = bind_linear(b, be, p + "self_attn.q_proj", q_dim, H, c.qkv_bias, why);
    l.k_proj = bind_linear(b, be, p + "self_attn.k_proj", kv_dim, H, c.qkv_bias, why);
    l.v_proj = bind_linear(b, be, p + "self_attn.v_proj", kv_dim, H, c.qkv_bias, why);
    l.o_proj = bind_linear(b, be, p + "self_attn.o_proj", H, q_dim, c.o_bias, why);
    if (c.qk_norm) {
      l.q_norm = bind_vector(b, be, p + "self_attn.q_norm.weight", c.head_dim, WeightInit::Gain, why);
      l.k_norm = bind_vector(b, be, p + "self_attn.k_norm.weight", c.head_dim, WeightInit::Gain, why);
    }
    l.post_attention_layernorm = bind_vector(b, be, p + "post_attention_layernorm.weight", H, WeightInit::Gain, why);
    l.gate_proj = bind_linear(b, be, p + "mlp.gate_proj", c.intermediate_size, H, false, why);
    l.up_proj = bind_linear(b, be, p + "mlp.up_proj", c.intermediate_size, H, false, why);
    l.down_proj = bind_linear(b, be, p + "mlp.down_proj", H, c.intermediate_size, false, why);
    w.layers.push_back(std::move(l));
  }
  w.norm = bind_vector(b, be, "norm.weight", H, WeightInit::Gain, why);
}

std::string QwenTextEncoder::tensor_prefix(const std::function<bool(const std::string&)>& has_tensor,
                                           const std::string& where) {
  for (const char* prefix : {"model.language_model.", "model.", "language_model.model.", ""})
    if (has_tensor(std::string(prefix) + "embed_tokens.weight")) return prefix;
  fail_input("{}: no embed_tokens.weight under model. or model.language_model. (is this a Qwen2.5-VL or Qwen3-VL text encoder?)",
             where);
}

std::string QwenTextEncoder::tensor_prefix(const Component& comp) {
  return tensor_prefix([&](const std::string& name) { return comp.has_tensor(name); }, comp.where());
}

QwenTextEncoder::QwenTextEncoder(Backend& backend, const Component& component)
    : QwenTextEncoder(backend, TextEncoderConfig::from(component.config()),
                      ComponentLoader(component, tensor_prefix(component))) {}

QwenTextEncoder::QwenTextEncoder(Backend& backend, const TextEncoderConfig& config, WeightBinder& binder) : be_(backend), config_(config) {
  bind(binder, &be_, config_, w_);
}

std::unique_ptr<QwenTextEncoder> QwenTextEncoder::load(Backend& backend, const Component& component,
                                                       const WeightReader& reader, const Log& log) {
  Stopwatch load;
  auto binder = reader.binder(component, tensor_prefix(component));
  auto encoder = std::make_unique<QwenTextEncoder>(backend, TextEncoderConfig::from(component.config()), *binder);
  log.info("text encoder loaded ({} layers, hidden {}) in {:.1f} s", encoder->config().num_hidden_layers,
           encoder->config().hidden_size, load.seconds());
  return encoder;
}

std::vector<WeightSpec> QwenTextEncoder::weight_specs(const TextEncoderConfig& config, const std::string& prefix) {
  SpecRecorder recorder;
  Weights unused;
  bind(recorder, nullptr, config, unused);
  for (auto& s : recorder.specs) s.name = prefix + s.name;
  return recorder.specs;
}

Tensor QwenTextEncoder::embed(const std::vector<int64_t>& ids) {
  const auto L = static_cast<int64_t>(ids.size());
  DITBATCH_CHECK(L > 0, "text encoder: empty token sequence");
  Tensor id_tensor = Tensor::host({L}, DType::I64);
  std::copy(ids.begin(), ids.end(), id_tensor.data<int64_t>());
  return be_.embedding(w_.embed_tokens, id_tensor);  // [L, hidden], the f32 residual stream
}

void QwenTextEncoder::scatter_image_rows(Tensor& x, const std::vector<int64_t>& ids, const Tensor& image_rows) {
  const auto pads = static_cast<int64_t>(std::count(ids.begin(), ids.end(), config_.image_token_id));
  if (image_rows.rank() != 2 || image_rows.dim(0) != pads || image_rows.dim(1) != x.dim(1))
    fail_input("text encoder: image features and image tokens do not match: {} tokens {} of width {}, features {}",
               pads, config_.image_token_id, x.dim(1), image_rows.describe());
  const Tensor rows = image_rows.device() == x.device() ? image_rows : be_.upload(image_rows, DType::F32);
  // masked_scatter in order, one copy per run of consecutive pads (one run per image).
  int64_t used = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(ids.size());) {
    if (ids[static_cast<size_t>(i)] != config_.image_token_id) {
      ++i;
      continue;
    }
    int64_t end = i;
    while (end < static_cast<int64_t>(ids.size()) && ids[static_cast<size_t>(end)] == config_.image_token_id) ++end;
    be_.copy_(x.slice0(i, end), rows.slice0(used, used + end - i));
    used += end - i;
    i = end;
  }
}

std::pair<Tensor, Tensor> QwenTextEncoder::rope_tables(const TextPositionIds& positions) {
  const TextEncoderConfig& c = config_;
  const int64_t L = positions.length(), Dh = c.head_dim, half = Dh / 2;
  // Frequency i takes the position of its M-RoPE section's axis. With equal rows (text only, or
  // the 1-D positions) that is every axis, and M-RoPE is plain RoPE (text-encoder.md §3.5).
  std::vector<int> axis_of(static_cast<size_t>(half), 0);
  if (!positions.rows_equal()) {
    if (c.mrope_interleaved)
      fail_input("text encoder: 3-D positions with an interleaved M-RoPE (Qwen3-VL) are not supported");
    DITBATCH_CHECK(c.mrope_section.size() == 3 && c.mrope_section[0] + c.mrope_section[1] + c.mrope_section[2] == half,
                   "text encoder: mrope_section does not cover head_dim / 2 = {}", half);
    for (int64_t i = 0; i < half; ++i)
      axis_of[static_cast<size_t>(i)] = i < c.mrope_section[0] ? 0 : i < c.mrope_section[0] + c.mrope_section[1] ? 1 : 2;
  }
  // NeoX pairs (j, j + Dh/2): inv_freq = 1 / theta^(2i/Dh) in float32, angle = float(p) * inv_freq.
  Tensor cos_t = Tensor::host({L, half}), sin_t = Tensor::host({L, half});
  const float theta = static_cast<float>(c.rope_theta);
  for (int64_t i = 0; i < half; ++i) {
    const float inv_freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(Dh));
    const std::vector<int64_t>& axis = positions.axes[static_cast<size_t>(axis_of[static_cast<size_t>(i)])];
    for (int64_t p = 0; p < L; ++p) {
      const float angle = static_cast<float>(axis[static_cast<size_t>(p)]) * inv_freq;
      cos_t.data<float>()[p * half + i] = Sleef_cosf_u10(angle);
      sin_t.data<float>()[p * half + i] = Sleef_sinf_u10(angle);
    }
  }
  return {be_.upload(cos_t, DType::F32), be_.upload(sin_t, DType::F32)};
}

Tensor QwenTextEncoder::encode(const std::vector<int64_t>& ids, const LayerHook& hook, Output output) {
  return forward(embed(ids), sequential_positions(static_cast<int64_t>(ids.size())), hook, output);
}

Tensor QwenTextEncoder::encode(const std::vector<int64_t>& ids, const Tensor& image_rows,
                               const TextPositionIds& positions, const LayerHook& hook, Output output) {
  if (positions.length() != static_cast<int64_t>(ids.size()) || positions.axes[1].size() != ids.size() ||
      positions.axes[2].size() != ids.size())
    fail_input("text encoder: position_ids of lengths {}, {}, {} for {} ids", positions.axes[0].size(),
               positions.axes[1].size(), positions.axes[2].size(), ids.size());
  Tensor x = embed(ids);
  scatter_image_rows(x, ids, image_rows);
  return forward(std::move(x), positions, hook, output);
}

Tensor QwenTextEncoder::forward(Tensor x, const TextPositionIds& positions, const LayerHook& hook, Output output) {
  const TextEncoderConfig& c = config_;
  const int64_t L = x.dim(0), Hq = c.num_attention_heads, Hkv = c.num_key_value_heads, Dh = c.head_dim;
  const auto [rope_cos, rope_sin] = rope_tables(positions);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));

  if (hook) hook(0, x);
  for (size_t k = 0; k < w_.layers.size(); ++k) {
    const Layer& l = w_.layers[k];
    Tensor h = be_.rms_norm(x, l.input_layernorm, eps);
    Tensor q = l.q_proj(be_, h).view({L, Hq, Dh});
    Tensor kk = l.k_proj(be_, h).view({L, Hkv, Dh});
    Tensor v = l.v_proj(be_, h).view({L, Hkv, Dh});
    if (c.qk_norm) {  // each head's Dh values normalised on their own: rows of [L x heads, Dh]
      q = be_.rms_norm(q.view({L * Hq, Dh}), l.q_norm, eps).view({L, Hq, Dh});
      kk = be_.rms_norm(kk.view({L * Hkv, Dh}), l.k_norm, eps).view({L, Hkv, Dh});
    }
    be_.rope_neox_(q, rope_cos, rope_sin);
    be_.rope_neox_(kk, rope_cos, rope_sin);
    Tensor o = be_.attention(q, kk, v, scale, true).view({L, Hq * Dh});
    be_.add_(x, l.o_proj(be_, o, DType::F32));
    Tensor m = be_.rms_norm(x, l.post_attention_layernorm, eps);
    be_.add_(x, l.down_proj(be_, be_.silu_mul(l.gate_proj(be_, m), l.up_proj(be_, m)), DType::F32));
    if (hook && k + 1 < w_.layers.size()) hook(static_cast<int64_t>(k) + 1, x);
  }
  Tensor y = output == Output::Normed ? be_.rms_norm(x, w_.norm, eps) : x;
  if (hook) hook(static_cast<int64_t>(w_.layers.size()), y);
  return y;
}

}  // namespace ditbatch
