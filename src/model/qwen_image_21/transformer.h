// QwenImage21Transformer2DModel (Qwen-Image-2.1's single-stream DiT), text-to-image: spec
// qwen-image-2.1.md §6. One sequence [text | image] through blocks whose weights every token
// shares; one modulation table for all blocks, the text rows reading the t = 0 row
// (causal_condition); tanh gates, no shift; block-causal attention (text causal, the image
// seeing everything); the text rows' K and V kept after the first step (diffusers'
// use_kv_cache), so later steps compute the image rows only.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/backend.h"
#include "io/config.h"
#include "model/lora.h"
#include "model/weights.h"

namespace ditbatch {

struct Transformer21Config {
  int64_t in_channels = 64, out_channels = 64;
  int64_t num_layers = 32, attention_head_dim = 128, num_attention_heads = 32;
  int64_t context_in_dim = 4096, mlp_ratio = 3;
  std::vector<int64_t> axes_dims_rope = {16, 56, 56};  // frame, height, width: pairs of a head's dims
  double eps = 1e-6;
  static constexpr int64_t kTimeProjDim = 256;
  static constexpr float kRopeTheta = 10000.0f;

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  int64_t ff_dim() const { return mlp_ratio * inner_dim(); }
  // transformer/config.json; refuses what the model does not implement (patch_size != 1,
  // causal_condition false).
  static Transformer21Config from(const Config& config);
  std::vector<BlockCount> block_counts() const { return {{"num_layers", num_layers, "transformer_blocks."}}; }
};

// What the first step of an image works out for the later ones: the text rows' keys and values
// of every block, after the QK-norm and RoPE (with room after them for the image rows each step
// writes), and the RoPE tables of the joint sequence.
struct Transformer21Cache {
  std::vector<Tensor> k, v;  // per block [L + S, H, Dh]
  Tensor rope_cos, rope_sin;  // [L + S, Dh/2] f32
  int64_t text_tokens = 0;   // L
  int64_t image_tokens = 0;  // S
  bool filled() const { return !k.empty(); }
};

class QwenImage21Transformer {
 public:
  QwenImage21Transformer(Backend& backend, const Transformer21Config& config, WeightBinder& binder);
  QwenImage21Transformer(Backend& backend, const Transformer21Config& config, WeightBinder&& binder)
      : QwenImage21Transformer(backend, config, binder) {}
  static std::vector<WeightSpec> weight_specs(const Transformer21Config& config);
  // What a LoRA may change (diffusers / PEFT keys of QwenImage21Transformer2DModel): every linear.
  static LoraTargets lora_targets(const Transformer21Config& config);
  // The multiply-adds x 2 of one forward over S image and L text tokens: the first step of an
  // image (the text rows too) or a cached one (the image rows, attending to all L + S keys).
  static double forward_flops(const Transformer21Config& config, int64_t image_tokens, int64_t text_tokens,
                              bool cached);
  const Transformer21Config& config() const { return config_; }

  // Called after each block with (block, the residual stream [rows, inner] f32): the text and
  // image rows on the first step, the image rows on a cached one.
  using BlockHook = std::function<void(int64_t, const Tensor&)>;
  // One denoising step of one sample: latents [S = h * w, in_channels] (packed by a plain
  // flatten), model time tt (t / 1000). With text (prompt_embeds [L, context_in_dim]) the whole
  // sequence runs and `cache` is filled (diffusers' "extract"); without, the cache's text rows
  // are read ("cached"). -> the velocity of the image rows [S, out_channels] (f32).
  Tensor forward(const Tensor& latents, const Tensor* text, float tt, int64_t h, int64_t w, Transformer21Cache& cache,
                 const BlockHook& hook = nullptr);

 private:
  struct Block {
    Linear to_q, to_k, to_v, to_out, proj, gate_layer, out;
    Tensor norm_q, norm_k;  // [Dh]
  };
  struct Weights {
    Linear img_in, txt_in_layer, txt_out_layer, time_linear_1, time_linear_2, modulation, norm_out_linear, proj_out;
    Tensor txt_norm;  // the zero-centred text norm's effective gain, w + 1 (f32)
    std::vector<Block> blocks;
  };
  // The modulation of one model time: per-block-shared scales [D] and tanh'd gates [D], and the
  // final norm's scale [D].
  struct Modulation {
    Tensor scale1, gate1, scale2, gate2, scale_out;
  };
  // A row group of the joint sequence and what it reads: the text (t = 0) or the image (t).
  struct Rows {
    int64_t begin = 0, end = 0;
    const Modulation* mod = nullptr;
    bool text = false;  // causal over the text keys; the image attends to every key
  };
  static void bind(WeightBinder& binder, Backend* be, const Transformer21Config& c, Weights& w);
  Modulation modulation(float tt);
  // cos, sin [L + S, Dh/2]: text token j at (j, j, j), image token (y, x) at frame L and
  // (y - ceil(h/2), x - ceil(w/2)).
  std::pair<Tensor, Tensor> rope_tables(int64_t L, int64_t h, int64_t w);
  void block_forward(const Block& block, Tensor& x, const std::vector<Rows>& groups, const Tensor& cos,
                     const Tensor& sin, Tensor& k_all, Tensor& v_all, int64_t row0);

  Backend& be_;
  Transformer21Config config_;
  Weights w_;
  Tensor zero_shift_;  // [D] zeros: the modulated LayerNorm without a shift
  Modulation text_modulation_;  // of t = 0, which the text rows read at every first step: made once
};

}  // namespace ditbatch
