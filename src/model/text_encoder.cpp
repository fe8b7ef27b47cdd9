#include "model/text_encoder.h"

#include <sleef.h>

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
  if (comp.has(key("use_sliding_window")) && comp.get_bool(key("use_sliding_window")))
    fail_input("{}: use_sliding_window = true is not supported", comp.where());
  const std::string model_type = comp.has("model_type") ? comp.get_string("model_type") : "";
  if (model_type.rfind("qwen3", 0) == 0) {
    c.qk_norm = true;
    c.qkv_bias = c.o_bias = comp.has(key("attention_bias")) && comp.get_bool(key("attention_bias"));
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

Tensor QwenTextEncoder::encode(const std::vector<int64_t>& ids, const LayerHook& hook, Output output) {
  const TextEncoderConfig& c = config_;
  const int64_t L = static_cast<int64_t>(ids.size()), Hq = c.num_attention_heads, Hkv = c.num_key_value_heads,
                Dh = c.head_dim, half = Dh / 2;
  DITBATCH_CHECK(L > 0, "text encoder: empty token sequence");
  Tensor id_tensor = Tensor::host({L}, DType::I64);
  std::copy(ids.begin(), ids.end(), id_tensor.data<int64_t>());

  // RoPE (NeoX pairs j, j + Dh/2): inv_freq = 1 / theta^(2i/Dh) in float32, angle = p * inv_freq;
  // MRoPE reduces to this for text because its three position rows are equal (spec §3.5).
  Tensor cos_t = Tensor::host({L, half}), sin_t = Tensor::host({L, half});
  const float theta = static_cast<float>(c.rope_theta);
  for (int64_t i = 0; i < half; ++i) {
    const float inv_freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(Dh));
    for (int64_t p = 0; p < L; ++p) {
      const float angle = static_cast<float>(p) * inv_freq;
      cos_t.data<float>()[p * half + i] = Sleef_cosf_u10(angle);
      sin_t.data<float>()[p * half + i] = Sleef_sinf_u10(angle);
    }
  }
  Tensor rope_cos = be_.upload(cos_t, DType::F32), rope_sin = be_.upload(sin_t, DType::F32);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));

  Tensor x = be_.embedding(w_.embed_tokens, id_tensor);  // [L, hidden], the f32 residual stream
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
