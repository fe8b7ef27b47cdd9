// QwenImageTransformer2DModel (the MMDiT), as diffusers computes it: spec qwen-image.md §4.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "io/weight_store.h"
#include "model/joint_rows.h"
#include "model/lora.h"
#include "model/weights.h"

namespace ditbatch {

struct TransformerConfig {
  int64_t patch_size = 2;
  int64_t in_channels = 64;
  int64_t out_channels = 16;
  int64_t num_layers = 60;
  int64_t attention_head_dim = 128;
  int64_t num_attention_heads = 24;
  int64_t joint_attention_dim = 3584;
  std::vector<int64_t> axes_dims_rope = {16, 56, 56};
  float eps = 1e-6f;
  // Qwen-Image-Edit-2511: the condition images' rows of the image stream are modulated at t = 0
  // (qwen-image-edit.md §9.2).
  bool zero_cond_t = false;
  static constexpr int64_t kTimeProjDim = 256;  // Timesteps(num_channels=256) in diffusers
  static constexpr float kRopeTheta = 10000.0f;

  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  int64_t ff_dim() const { return 4 * inner_dim(); }  // FeedForward(mult=4)
  int64_t out_dim() const { return patch_size * patch_size * out_channels; }
  static TransformerConfig from(const Config& config);  // validates
  std::vector<BlockCount> block_counts() const { return {{"num_layers", num_layers, "transformer_blocks."}}; }
};

// One image of the transformer's image stream in packed tokens (the latent grid / 2): an entry
// (1, h, w) of diffusers' img_shapes.
struct PackedGrid {
  int64_t h = 0, w = 0;
  int64_t tokens() const { return h * w; }
  auto operator<=>(const PackedGrid&) const = default;
};

// Work that depends only on the timestep: computed once per step, shared by the cond and
// negative passes (and by every image of a batch with the same step).
struct TimestepConditioning {
  Tensor temb;                     // [D]
  std::vector<Tensor> img_mod;     // per block [6, D]: shift1, scale1, gate1, shift2, scale2, gate2
  std::vector<Tensor> txt_mod;     // per block [6, D]
  Tensor norm_out;                 // [2, D]: scale, shift (scale first)
  // zero_cond_t: per block [6, D], img_mod at t = 0, read by the condition images' rows; the
  // same vectors at every step (empty without zero_cond_t).
  std::vector<Tensor> img_mod_zero_t;
};

// Each model time of `times` once (by its float bits), in the order given: the set a transformer
// conditions at load.
std::vector<float> distinct_model_times(const std::vector<float>& times);

class QwenImageTransformer {
 public:
  // Loads from the /transformer component of a weight file.
  QwenImageTransformer(Backend& backend, const Component& component);
  // Weights from any binder (random weights for benchmarks, regenerated weights in tests).
  QwenImageTransformer(Backend& backend, const TransformerConfig& config, WeightBinder& binder);
  QwenImageTransformer(Backend& backend, const TransformerConfig& config, WeightBinder&& binder) : QwenImageTransformer(backend, config, binder) {}
  // Loads and computes the conditioning of every model time in `timesteps` while loading, block
  // by block, releasing each block's modulation weights (img_mod, txt_mod: a third of the
  // parameters) as soon as its vectors exist, and then the time embedder and norm_out's linear:
  // a run that knows its schedules holds ~30 % less, never the whole modulation at once, and no
  // step computes it again. condition() then serves exactly those model times (none for an
  // empty list), with the same bits as a loaded model computes.
  QwenImageTransformer(Backend& backend, const TransformerConfig& config, WeightBinder& binder,
                       const std::vector<float>& timesteps);
  // The tensors a model with this config holds (for make-tiny and checks).
  static std::vector<WeightSpec> weight_specs(const TransformerConfig& config);
  // What a LoRA may change: every linear of weight_specs.
  static LoraTargets lora_targets(const TransformerConfig& config);

  const TransformerConfig& config() const { return config_; }
  // tt = f32(t / 1000), as the pipeline passes it.
  TimestepConditioning condition(float tt);
  // False once the conditioning was computed at load and the weights that only feed it (time
  // embedder, modulation linears, norm_out's linear) released.
  bool conditioning_weights_resident() const { return conditioning_weights_resident_; }
  // Device bytes of the conditioning of `timesteps` model times (f32 vectors; with zero_cond_t,
  // plus the t = 0 img_mod vectors once), and of the weights it replaces (all in the weight
  // dtype): computing at load pays when it holds at most half.
  static int64_t conditioning_bytes(const TransformerConfig& config, int64_t timesteps);
  static int64_t conditioning_weight_bytes(const TransformerConfig& config, size_t weight_dtype_size);
  static bool conditioning_at_load_pays(const TransformerConfig& config, int64_t timesteps, size_t weight_dtype_size);
  // Called after each block with (block index, text stream [L, D], image stream [S, D]).
  using BlockHook = std::function<void(int64_t, const Tensor&, const Tensor&)>;
  // One sample: latents [S, 64] packed, the images of img_shapes in order: the noise latents'
  // grid first, then each condition image's (Edit), S = S0 + S1 + ...; text [L, J] of which the
  // first text_valid tokens are real (the rest is padding: masked as keys). The hook sees the
  // whole image stream [S, D]. -> the noise latents' velocity [S0, 64] (diffusers' v[:, :S0]).
  Tensor forward(const Tensor& latents, const Tensor& text, int64_t text_valid,
                 const std::vector<PackedGrid>& img_shapes, const TimestepConditioning& cond,
                 const BlockHook& hook = nullptr);
  // Text to image: one h x w grid, no condition images.
  Tensor forward(const Tensor& latents, const Tensor& text, int64_t text_valid, int64_t h, int64_t w,
                 const TimestepConditioning& cond, const BlockHook& hook = nullptr) {
    return forward(latents, text, text_valid, {PackedGrid{h, w}}, cond, hook);
  }
  // True CFG's two passes over the same latents as one batch: the image-token work of both
  // samples runs as one [2S, D] stream (every image GEMM with M = 2S, half the elementwise
  // launches); attention and the tiny text projections to_add_out and add_v_proj run per
  // sample. The same velocities as forward() with text and with neg_text, to rounding.
  // -> {velocity with text, with neg_text}, [S0, 64] each.
  std::pair<Tensor, Tensor> forward_cfg(const Tensor& latents, const Tensor& text, int64_t text_valid,
                                        const Tensor& neg_text, int64_t neg_valid,
                                        const std::vector<PackedGrid>& img_shapes, const TimestepConditioning& cond);
  std::pair<Tensor, Tensor> forward_cfg(const Tensor& latents, const Tensor& text, int64_t text_valid,
                                        const Tensor& neg_text, int64_t neg_valid, int64_t h, int64_t w,
                                        const TimestepConditioning& cond) {
    return forward_cfg(latents, text, text_valid, neg_text, neg_valid, {PackedGrid{h, w}}, cond);
  }
  // Multiply-adds of one forward (for GFLOP/s and MFU), excluding elementwise work. image_tokens:
  // the whole image stream, the noise latents' and every condition image's (proj_out covers them all).
  static double forward_flops(const TransformerConfig& config, int64_t image_tokens, int64_t text_tokens);

 private:
  // cos/sin tables [tokens, Dh/2] (§4.5; Edit: qwen-image-edit.md §9.1), built once and kept:
  // every step and both CFG passes reuse them. Image: the grids of img_shapes in order, image k
  // at frame k, repeated `count` times (a CFG batch's image rows); text: `count` tokens placed
  // after the largest grid.
  struct RopeTables {
    Tensor cos, sin;
  };
  // The image stream's rows by the modulation they read (§9.2): per sample, the noise latents'
  // S0 rows read the real t's vectors; with zero_cond_t, the condition images' rows those of t = 0.
  struct ImageRows {
    int64_t samples = 1, per_sample = 0, target = 0;  // B, S, S0
    bool zero_t_conditions = false;                   // zero_cond_t, with condition images
  };
  // One modulation vector of the image stream [D]: `real` for every row, or, where `zero_t` is
  // defined, only for the noise latents' rows and `zero_t` for the condition images'.
  struct ImageVector {
    Tensor real, zero_t;
    const Tensor& rows(bool condition_rows) const;  // the vector those rows read
  };
  // A block's image modulation [6, D]: img_mod at the real t, and at t = 0 (zero_cond_t with
  // condition images; undefined otherwise).
  struct ImageMod {
    Tensor real, zero_t;
    ImageVector chunk(int64_t k) const;
  };
  // What every block of one forward reads: the rows of the joint sequences, their RoPE tables
  // (the image rows of all samples; each sample's text), the attention scale.
  struct JointContext {
    const JointRows& rows;
    const ImageRows& image_rows;
    const RopeTables& image_rope;
    const std::array<RopeTables, 2>& text_rope;
    float scale;
    const Tensor* spare_keys;  // [spare, D] zeros for the K and V rows past the last sample (when spare > 0)
  };
  // The two streams of the MMDiT: image [B*S, D] and text [L_all, D]; f32 as residuals, in the
  // act dtype once normalised and modulated.
  struct Streams {
    Tensor image, text;
  };
  // Past a block's last residual add, the LayerNorm + modulation that comes next, fused into that
  // add: the next block's img_norm1/txt_norm1 with its mod1 (shift, scale), or, after the last
  // block, norm_out for the image stream alone (no text: only a hook reads that stream then).
  struct Seam {
    ImageVector image_shift, image_scale;
    std::optional<std::pair<Tensor, Tensor>> text;  // shift, scale
  };
  struct Block {
    Linear img_mod, txt_mod;
    Linear to_q, to_k, to_v, add_q_proj, add_k_proj, add_v_proj, to_out, to_add_out;
    Tensor norm_q, norm_k, norm_added_q, norm_added_k;
    Linear img_mlp_in, img_mlp_out, txt_mlp_in, txt_mlp_out;

    // diffusers' QwenImageTransformerBlock.forward. `modulated`: this block's img_norm1/txt_norm1
    // + mod1, made at the seam before it; img_mod / txt_mod [6, D]: shift1, scale1, gate1, shift2,
    // scale2, gate2. Updates the residual streams; returns what the seam after it makes.
    Streams forward(Backend& be, const TransformerConfig& c, Streams& residual, const Streams& modulated,
                    const ImageMod& img_mod_params, const Tensor& txt_mod_params, const JointContext& joint,
                    const Seam& next) const;
    // attn (QwenDoubleStreamAttnProcessor2_0): the joint attention -> {to_out, to_add_out} (f32).
    Streams attention(Backend& be, const TransformerConfig& c, const Streams& modulated,
                      const JointContext& joint) const;
    // img_mlp / txt_mlp (tanh-GELU), each stream with its own weights -> f32.
    Streams feed_forward(Backend& be, const Streams& modulated) const;
  };
  struct Weights {
    Linear img_in, txt_in, time_linear_1, time_linear_2, norm_out_linear, proj_out;
    Tensor txt_norm;
    std::vector<Block> blocks;
  };
  // Binds every weight in one fixed order (collective loading depends on it); after_block, if
  // given, runs as soon as a block's weights are bound.
  static void bind(WeightBinder& binder, Backend* be, const TransformerConfig& c, Weights& w,
                   const std::function<void(Block&)>& after_block = nullptr);
  // temb [1, D] (f32) of one model time; a block's img_mod / txt_mod vectors from act = silu(temb).
  Tensor time_embedding(float tt);
  void append_modulation(const Block& block, const Tensor& act, TimestepConditioning& cond);
  // zero_cond_t: img_mod at t = 0 of every block, computed once (at load, or at the first
  // condition()) and shared by every model time's conditioning.
  void append_zero_t_modulation(const Block& block, const Tensor& zero_t_act);
  const std::vector<Tensor>& img_mod_zero_t();
  // One sample's text: embeds [L, J], of which the first `valid` tokens are real.
  struct TextInput {
    const Tensor* embeds;
    int64_t valid;
  };
  // forward() of one sample, or of two sharing latents and conditioning -> [samples * S, 64]:
  // proj_out over the whole image stream, of which the caller keeps each sample's first S0 rows.
  Tensor forward_samples(const Tensor& latents, const std::vector<TextInput>& texts,
                         const std::vector<PackedGrid>& img_shapes, const TimestepConditioning& cond,
                         const BlockHook& hook);
  // The image stream's LayerNorm + modulation, and its gated residual add fused with the next
  // LayerNorm: each run of rows with its own vectors, in one pass over all rows where every row
  // reads the same ones.
  static Tensor image_layer_norm_modulate(Backend& be, const ImageRows& rows, const Tensor& x,
                                          const ImageVector& shift, const ImageVector& scale, float eps);
  static Tensor image_gated_add_layer_norm_modulate_(Backend& be, const ImageRows& rows, Tensor& x,
                                                     const ImageVector& gate, const Tensor& y,
                                                     const ImageVector& shift, const ImageVector& scale, float eps);
  enum class RopeKind { Image, Text };
  RopeTables rope_tables(RopeKind kind, const std::vector<PackedGrid>& img_shapes, int64_t count);
  std::map<std::tuple<RopeKind, std::vector<PackedGrid>, int64_t>, RopeTables> rope_cache_;
  // [rows, D] zeros on the backend for the K and V rows past the last sample, made once.
  const Tensor& spare_key_rows(int64_t rows);
  Tensor spare_keys_;

  Backend& be_;
  TransformerConfig config_;
  Weights w_;
  std::map<uint32_t, TimestepConditioning> precomputed_;  // by the bits of tt
  std::vector<Tensor> img_mod_zero_t_;  // zero_cond_t: per block [6, D], once computed
  bool conditioning_weights_resident_ = true;
};

}  // namespace ditbatch
