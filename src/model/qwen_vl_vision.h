// The Qwen2.5-VL vision tower (transformers' Qwen2_5_VisionTransformerPretrainedModel), the image
// side of the Qwen-Image-Edit text encoder (spec qwen-image-edit.md §4): 14-px patches embedded
// by a linear, blocks of windowed (or, in fullatt_block_indexes, whole-image) attention with a
// 2-D RoPE, then 2x2 patches merged into one token each. Its weights are the text encoder's
// `visual.*` tensors; its config is the text encoder's `vision_config`.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/log.h"
#include "io/weight_store.h"
#include "model/weights.h"

namespace ditbatch {

struct VisionConfig {
  int64_t depth = 32;
  int64_t hidden_size = 1280;
  int64_t num_heads = 16;
  int64_t intermediate_size = 3420;
  int64_t patch_size = 14;
  int64_t temporal_patch_size = 2;
  int64_t spatial_merge_size = 2;
  int64_t window_size = 112;  // pixels
  std::vector<int64_t> fullatt_block_indexes = {7, 15, 23, 31};
  int64_t out_hidden_size = 3584;
  int64_t in_channels = 3;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;  // fixed in transformers, not a config key

  int64_t head_dim() const { return hidden_size / num_heads; }
  // One row of pixel_values: (c, t, py, px) flattened, 3 * 2 * 14 * 14 = 1176.
  int64_t patch_dim() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
  int64_t merge_unit() const { return spatial_merge_size * spatial_merge_size; }  // patches per merged token
  // A window's side in merged cells: 112 / 2 / 14 = 4.
  int64_t window_cells() const { return window_size / spatial_merge_size / patch_size; }
  bool full_attention(int64_t block) const;
  // From the text encoder's config.json: its "vision_config" object (transformers 4 names the
  // input channels in_chans, 5 in_channels; the RoPE theta sits in rope_parameters in 5).
  static VisionConfig from(const Config& text_encoder_config);
  std::vector<BlockCount> block_counts(const std::string& prefix) const {
    return {{"vision_config.depth", depth, prefix + "blocks."}};
  }
};

// One image's grid in patches: (t, h, w) of image_grid_thw. Images have t = 1.
struct ImageGrid {
  int64_t t = 1, h = 0, w = 0;
  int64_t patches() const { return t * h * w; }
};

// Which rows attend to which, for a batch of images (transformers' get_vision_window_index and
// get_vision_cu_seqlens). Rows are patches; a merged cell is the merge_unit() consecutive patches
// of one 2x2 merge block.
struct VisionWindows {
  // The merged cells in window order: windows row-major over each image's merged grid, cells
  // row-major inside a window, ids counted over the whole batch (image 0's cells first).
  std::vector<int64_t> window_index;
  // Window boundaries in patch rows, from 0 to Np, each window once (empty padded windows gone).
  std::vector<int64_t> cu_window_seqlens;
  // Image boundaries in patch rows, from 0 to Np: the segments of the full-attention blocks.
  std::vector<int64_t> cu_seqlens;
};
// Throws InputError for a grid the tower cannot take (t != 1, a side not a multiple of the merge size).
VisionWindows vision_windows(const std::vector<ImageGrid>& grids, const VisionConfig& config);

// The 2-D RoPE of every patch row in window order: cos, sin f32 [Np, head_dim / 2], where column
// j < head_dim/4 rotates by row h * inv_freq[j] and the rest by column w * inv_freq[j - head_dim/4]
// (torch's [h, w, h, w] table is these two halves twice: the NeoX pairs j, j + head_dim/2).
struct VisionRope {
  Tensor cos, sin;  // host f32
};
VisionRope vision_rope(const std::vector<ImageGrid>& grids, const VisionWindows& windows, const VisionConfig& config);

class QwenVisionTower {
 public:
  // The tower of a text-encoder component: its `visual.*` tensors and its config's vision_config.
  QwenVisionTower(Backend& backend, const Component& text_encoder);
  // Weights from any binder, names as in the checkpoint after "visual." (blocks.0.attn.qkv.weight).
  QwenVisionTower(Backend& backend, const VisionConfig& config, WeightBinder& binder);
  QwenVisionTower(Backend& backend, const VisionConfig& config, WeightBinder&& binder)
      : QwenVisionTower(backend, config, binder) {}
  static std::unique_ptr<QwenVisionTower> load(Backend& backend, const Component& text_encoder,
                                               const WeightReader& reader, const Log& log);
  static std::vector<WeightSpec> weight_specs(const VisionConfig& config, const std::string& prefix = "visual.");
  static constexpr const char* kTensorPrefix = "visual.";
  const VisionConfig& config() const { return config_; }

  // Called with (k, hidden) after block k (k = 0..depth-1): [Np, hidden] f32, rows in window order.
  using BlockHook = std::function<void(int64_t, const Tensor&)>;
  // pixel_values: host f32 [Np, patch_dim()], each image's patches in merge-block order (the
  // image processor's rows), images one after another as in `grids`.
  // -> [Np / merge_unit(), out_hidden_size] f32: one token per merge block, in raster order of
  // the merged grid, image 0's tokens first.
  Tensor forward(const Tensor& pixel_values, const std::vector<ImageGrid>& grids, const BlockHook& hook = nullptr);

 private:
  struct Block {
    Tensor norm1, norm2;
    Linear qkv, proj, gate_proj, up_proj, down_proj;
  };
  struct Weights {
    Tensor patch_embed;  // [hidden, patch_dim]: the Conv3d's kernel flattened (stride = kernel)
    std::vector<Block> blocks;
    Tensor merger_ln_q;
    Linear merger_fc1, merger_fc2;  // merger.mlp.0, merger.mlp.2
  };
  static void bind(WeightBinder& binder, Backend* be, const VisionConfig& c, Weights& w);
  // x += proj(attention of norm1(x) within each segment of `segments`), x f32 [Np, hidden].
  void attention_block(const Block& b, Tensor& x, const std::vector<int64_t>& segments, const Tensor& rope_cos,
                       const Tensor& rope_sin);
  // [Np, hidden] -> [Np / merge_unit, out_hidden_size], rows still in window order.
  Tensor merge(const Tensor& x);

  Backend& be_;
  VisionConfig config_;
  Weights w_;
};

}  // namespace ditbatch
