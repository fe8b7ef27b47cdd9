// The text-only path of a Qwen-VL language model: Qwen2.5-VL's, Qwen-Image's text encoder (spec
// text-encoder.md §3), and Qwen3-VL's, Qwen-Image-2.1's (spec qwen-image-2.1.md §5.1: no
// biases, an RMSNorm on each head of q and k before RoPE). For text the M-RoPE of both is
// plain RoPE: its three position rows are equal. Qwen-Image reads the last layer after the
// final RMSNorm, Qwen-Image-2.1 before it (Output). The Edit pipelines' prompts hold image
// tokens: their embeddings are replaced by the vision tower's rows, and their positions may be
// 3-D (spec qwen-image-edit.md §6).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/log.h"
#include "io/weight_store.h"
#include "model/text_positions.h"
#include "model/weights.h"

namespace ditbatch {

struct TextEncoderConfig {
  int64_t hidden_size = 3584;
  int64_t num_hidden_layers = 28;
  int64_t num_attention_heads = 28;
  int64_t num_key_value_heads = 4;
  int64_t head_dim = 128;
  int64_t intermediate_size = 18944;
  int64_t vocab_size = 152064;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1000000.0;
  // Qwen2.5-VL: q, k and v with biases, o without. Qwen3-VL: all four as attention_bias says.
  bool qkv_bias = true, o_bias = false;
  bool qk_norm = false;  // Qwen3-VL: q_norm and k_norm [head_dim] on each head before RoPE
  // M-RoPE: how many of the head_dim / 2 frequencies take the temporal, height and width
  // position, in contiguous sections (Qwen2.5-VL; transformers' default when the config has
  // none). Qwen3-VL interleaves them instead, which only 1-D positions may use here.
  std::vector<int64_t> mrope_section = {16, 24, 24};
  bool mrope_interleaved = false;
  int64_t image_token_id = 151655;  // the config's image_token_id: the pads encode() replaces
  // transformers 4.x keeps the text keys at the top level, 5.x under "text_config".
  static TextEncoderConfig from(const Config& config);
  // prefix: the component's state-dict prefix (QwenTextEncoder::tensor_prefix).
  std::vector<BlockCount> block_counts(const std::string& prefix) const {
    return {{"num_hidden_layers", num_hidden_layers, prefix + "layers."}};
  }
};

class QwenTextEncoder {
 public:
  // Accepts both the legacy "model.layers.*" and the newer "model.language_model.layers.*" names.
  QwenTextEncoder(Backend& backend, const Component& component);
  // Weights from any binder (random weights for benchmarks, regenerated weights in tests).
  QwenTextEncoder(Backend& backend, const TextEncoderConfig& config, WeightBinder& binder);
  // A pipeline's encoder: the component's tensors under its prefix from `reader` (MPI: one
  // reader per node), timed and logged.
  static std::unique_ptr<QwenTextEncoder> load(Backend& backend, const Component& component, const WeightReader& reader,
                                               const Log& log);
  QwenTextEncoder(Backend& backend, const TextEncoderConfig& config, WeightBinder&& binder)
      : QwenTextEncoder(backend, config, binder) {}
  static std::vector<WeightSpec> weight_specs(const TextEncoderConfig& config, const std::string& prefix = "model.");
  // The state-dict prefix in front of embed_tokens / layers / norm in this component:
  // "model." (legacy checkpoints) or "model.language_model." (transformers >= 4.52 names).
  static std::string tensor_prefix(const Component& component);
  // The same for any set of names (`has_tensor`): the converter's safetensors; `where` for the error.
  static std::string tensor_prefix(const std::function<bool(const std::string&)>& has_tensor, const std::string& where);
  const TextEncoderConfig& config() const { return config_; }

  // Called with (k, hidden) for k = 0 (the embeddings) and after each layer k = 1..num_layers.
  using LayerHook = std::function<void(int64_t, const Tensor&)>;
  // What encode returns: the last layer's output after the final norm (hidden_states[-1] of
  // transformers 4; Qwen-Image), or before it (Qwen-Image-2.1's tap).
  enum class Output { Normed, BeforeFinalNorm };
  // One sequence, positions 0..L-1, causal attention: -> [L, hidden]. The hook's last call
  // (k = num_layers) gets what is returned.
  Tensor encode(const std::vector<int64_t>& ids, const LayerHook& hook = nullptr, Output output = Output::Normed);
  // The same with image tokens (Qwen2_5_VLModel.forward): the embeddings of `ids` with the rows
  // of the image_token_id tokens replaced, in order, by `image_rows` [pads, hidden] (masked_scatter;
  // any float dtype, on this backend or the host), and RoPE at `positions` [3, L].
  Tensor encode(const std::vector<int64_t>& ids, const Tensor& image_rows, const TextPositionIds& positions,
                const LayerHook& hook = nullptr, Output output = Output::Normed);

 private:
  struct Layer {
    Tensor input_layernorm, post_attention_layernorm;
    Tensor q_norm, k_norm;  // [head_dim], Qwen3-VL only
    Linear q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;
  };
  struct Weights {
    Tensor embed_tokens;  // [vocab, hidden]
    std::vector<Layer> layers;
    Tensor norm;
  };
  static void bind(WeightBinder& binder, Backend* be, const TextEncoderConfig& c, Weights& w);
  Tensor embed(const std::vector<int64_t>& ids);                          // [L, hidden]
  void scatter_image_rows(Tensor& x, const std::vector<int64_t>& ids, const Tensor& image_rows);
  std::pair<Tensor, Tensor> rope_tables(const TextPositionIds& positions);  // cos, sin [L, head_dim / 2]
  Tensor forward(Tensor x, const TextPositionIds& positions, const LayerHook& hook, Output output);

  Backend& be_;
  TextEncoderConfig config_;
  Weights w_;
};

}  // namespace ditbatch
