#include "model/qwen_vl_vision.h"

#include <sleef.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/timer.h"

namespace ditbatch {

namespace {

// A grid side far past any image the processor makes (max_pixels 12,845,056 is 256 x 256
// patches), so that every row count and cell id below fits easily in int64.
constexpr int64_t kMaxGridSide = int64_t{1} << 14;

}  // namespace

bool VisionConfig::full_attention(int64_t block) const {
  return std::find(fullatt_block_indexes.begin(), fullatt_block_indexes.end(), block) != fullatt_block_indexes.end();
}

VisionConfig VisionConfig::from(const Config& te) {
  if (!te.has("vision_config"))
    fail_input("{}: no vision_config: the Edit pipelines need a Qwen2.5-VL text encoder with its vision tower",
               te.where());
  const std::string p = "vision_config.";
  VisionConfig c;
  c.depth = te.get_int(p + "depth", 1, kMaxConfigDepth);
  c.hidden_size = te.get_int(p + "hidden_size", 1, kMaxConfigWidth);
  c.num_heads = te.get_int(p + "num_heads", 1, kMaxConfigWidth);
  c.intermediate_size = te.get_int(p + "intermediate_size", 1, kMaxConfigWidth);
  c.patch_size = te.get_int(p + "patch_size", 1, 1024);
  c.temporal_patch_size = te.get_int(p + "temporal_patch_size", 1, 16);
  c.spatial_merge_size = te.get_int(p + "spatial_merge_size", 1, 16);
  c.window_size = te.get_int(p + "window_size", 1, kMaxConfigWidth);
  c.out_hidden_size = te.get_int(p + "out_hidden_size", 1, kMaxConfigWidth);
  // transformers 4 writes in_chans, 5 in_channels; both default to 3 in the config class.
  if (te.has(p + "in_channels"))
    c.in_channels = te.get_int(p + "in_channels", 1, 16);
  else if (te.has(p + "in_chans"))
    c.in_channels = te.get_int(p + "in_chans", 1, 16);
  if (te.has(p + "rope_parameters.rope_theta"))
    c.rope_theta = te.get_double(p + "rope_parameters.rope_theta");
  else if (te.has(p + "rope_theta"))
    c.rope_theta = te.get_double(p + "rope_theta");
  c.fullatt_block_indexes = te.get_ints(p + "fullatt_block_indexes");
  for (int64_t i : c.fullatt_block_indexes)
    if (i < 0 || i >= c.depth)
      fail_input("{}: vision_config.fullatt_block_indexes holds {}, outside the {} blocks (depth)", te.where(), i,
                 c.depth);
  if (te.has(p + "hidden_act") && te.get_string(p + "hidden_act") != "silu")
    fail_input("{}: vision_config.hidden_act '{}': the Qwen2.5-VL vision tower's MLP is SiLU-gated", te.where(),
               te.get_string(p + "hidden_act"));
  // Each head's channels split in four for the [h, w, h, w] RoPE.
  if (c.hidden_size % c.num_heads != 0 || c.head_dim() % 4 != 0)
    fail_input("{}: vision_config hidden_size {} must be num_heads {} x a head_dim divisible by 4", te.where(),
               c.hidden_size, c.num_heads);
  if (c.window_cells() < 1)
    fail_input("{}: vision_config.window_size {} is under one merged cell ({} x {} pixels)", te.where(), c.window_size,
               c.spatial_merge_size, c.patch_size);
  if (c.patch_dim() > kMaxConfigWidth || c.hidden_size * c.merge_unit() > kMaxConfigWidth)
    fail_input("{}: vision_config patch ({} x {} x {}^2) or merged width ({} x {}) past {}", te.where(),
               c.in_channels, c.temporal_patch_size, c.patch_size, c.hidden_size, c.merge_unit(), kMaxConfigWidth);
  if (!(c.rope_theta > 0)) fail_input("{}: vision_config rope_theta {} must be positive", te.where(), c.rope_theta);
  return c;
}

VisionWindows vision_windows(const std::vector<ImageGrid>& grids, const VisionConfig& c) {
  if (grids.empty()) fail_input("vision tower: no images");
  const int64_t merge = c.spatial_merge_size, side = c.window_cells(), unit = c.merge_unit();
  VisionWindows out;
  out.cu_window_seqlens = {0};
  out.cu_seqlens = {0};
  int64_t first_cell = 0;  // the image's first merged-cell id in the batch
  for (size_t i = 0; i < grids.size(); ++i) {
    const ImageGrid& g = grids[i];
    if (g.t != 1)
      fail_input("vision tower: image {} has grid_thw ({}, {}, {}): only still images (t = 1) are supported", i, g.t,
                 g.h, g.w);
    if (g.h <= 0 || g.w <= 0 || g.h % merge != 0 || g.w % merge != 0 || g.h > kMaxGridSide || g.w > kMaxGridSide)
      fail_input("vision tower: image {} has a grid of {} x {} patches: each side must be a multiple of "
                 "spatial_merge_size {} in 1..{}", i, g.h, g.w, merge, kMaxGridSide);
    const int64_t mh = g.h / merge, mw = g.w / merge;  // the merged grid
    // transformers pads each side by `side - n % side`: one more whole window where n is already a
    // multiple. Such windows hold no cells, and their repeated boundary is dropped
    // (unique_consecutive): only windows with cells count.
    const int64_t windows_h = mh / side + 1, windows_w = mw / side + 1;
    for (int64_t wy = 0; wy < windows_h; ++wy)
      for (int64_t wx = 0; wx < windows_w; ++wx) {
        int64_t cells = 0;
        for (int64_t y = wy * side; y < std::min((wy + 1) * side, mh); ++y)
          for (int64_t x = wx * side; x < std::min((wx + 1) * side, mw); ++x, ++cells)
            out.window_index.push_back(first_cell + y * mw + x);
        if (cells > 0) out.cu_window_seqlens.push_back(out.cu_window_seqlens.back() + cells * unit);
      }
    first_cell += mh * mw;
    out.cu_seqlens.push_back(out.cu_seqlens.back() + g.patches());
  }
  return out;
}

VisionRope vision_rope(const std::vector<ImageGrid>& grids, const VisionWindows& windows, const VisionConfig& c) {
  const int64_t merge = c.spatial_merge_size, unit = c.merge_unit(), half = c.head_dim() / 2, quarter = half / 2;
  // inv_freq as transformers computes it in f32: 1 / theta^(2k / (head_dim / 2)), k < head_dim / 4.
  std::vector<float> inv_freq(static_cast<size_t>(quarter));
  const float theta = static_cast<float>(c.rope_theta);
  for (int64_t k = 0; k < quarter; ++k)
    inv_freq[static_cast<size_t>(k)] = 1.0f / std::pow(theta, static_cast<float>(2 * k) / static_cast<float>(half));
  // Each merged cell's row and column in its image's merged grid, by its id in the batch.
  struct Cell {
    int64_t row, col;
  };
  std::vector<Cell> cells;
  for (const ImageGrid& g : grids) {
    const int64_t mw = g.w / merge;
    for (int64_t id = 0; id < (g.h / merge) * mw; ++id) cells.push_back({id / mw, id % mw});
  }
  const int64_t Np = windows.cu_seqlens.back();
  VisionRope rope{Tensor::host({Np, half}), Tensor::host({Np, half})};
  float* cos_p = rope.cos.data<float>();
  float* sin_p = rope.sin.data<float>();
  int64_t row = 0;  // patch rows in window order; a cell's patches row-major inside its block
  for (int64_t cell_id : windows.window_index) {
    const Cell& cell = cells[static_cast<size_t>(cell_id)];
    for (int64_t i = 0; i < unit; ++i, ++row) {
      const float h = static_cast<float>(cell.row * merge + i / merge), w = static_cast<float>(cell.col * merge + i % merge);
      for (int64_t k = 0; k < quarter; ++k) {
        const float angle_h = h * inv_freq[static_cast<size_t>(k)], angle_w = w * inv_freq[static_cast<size_t>(k)];
        cos_p[row * half + k] = Sleef_cosf_u10(angle_h);
        sin_p[row * half + k] = Sleef_sinf_u10(angle_h);
        cos_p[row * half + quarter + k] = Sleef_cosf_u10(angle_w);
        sin_p[row * half + quarter + k] = Sleef_sinf_u10(angle_w);
      }
    }
  }
  return rope;
}

void QwenVisionTower::bind(WeightBinder& b, Backend* be, const VisionConfig& c, Weights& w) {
  const int64_t H = c.hidden_size, merged = H * c.merge_unit();
  const std::string why = fmt::format("vision_config hidden_size {}, intermediate_size {}, spatial_merge_size {}, "
                                      "out_hidden_size {}",
                                      H, c.intermediate_size, c.spatial_merge_size, c.out_hidden_size);
  // A Conv3d whose stride is its kernel sees each patch once: a linear over the flattened patch.
  const Tensor patch_embed = upload_bound(
      be, b.bind("patch_embed.proj.weight", {H, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size},
                 WeightInit::Matrix,
                 fmt::format("vision_config hidden_size {}, in_channels {}, temporal_patch_size {}, patch_size {}", H,
                             c.in_channels, c.temporal_patch_size, c.patch_size)));
  if (patch_embed.defined()) w.patch_embed = patch_embed.view({H, c.patch_dim()});
  for (int64_t i = 0; i < c.depth; ++i) {
    const std::string p = fmt::format("blocks.{}.", i);
    Block k;
    k.norm1 = bind_vector(b, be, p + "norm1.weight", H, WeightInit::Gain, why);
    k.qkv = bind_linear(b, be, p + "attn.qkv", 3 * H, H, true, why);
    k.proj = bind_linear(b, be, p + "attn.proj", H, H, true, why, LinearOut::F32);
    k.norm2 = bind_vector(b, be, p + "norm2.weight", H, WeightInit::Gain, why);
    k.gate_proj = bind_linear(b, be, p + "mlp.gate_proj", c.intermediate_size, H, true, why);
    k.up_proj = bind_linear(b, be, p + "mlp.up_proj", c.intermediate_size, H, true, why);
    k.down_proj = bind_linear(b, be, p + "mlp.down_proj", H, c.intermediate_size, true, why, LinearOut::F32);
    w.blocks.push_back(std::move(k));
  }
  w.merger_ln_q = bind_vector(b, be, "merger.ln_q.weight", H, WeightInit::Gain, why);
  w.merger_fc1 = bind_linear(b, be, "merger.mlp.0", merged, merged, true, why);
  w.merger_fc2 = bind_linear(b, be, "merger.mlp.2", c.out_hidden_size, merged, true, why, LinearOut::F32);
}

QwenVisionTower::QwenVisionTower(Backend& backend, const Component& text_encoder)
    : QwenVisionTower(backend, VisionConfig::from(text_encoder.config()),
                      ComponentLoader(text_encoder, kTensorPrefix)) {}

QwenVisionTower::QwenVisionTower(Backend& backend, const VisionConfig& config, WeightBinder& binder)
    : be_(backend), config_(config) {
  bind(binder, &be_, config_, w_);
}

std::unique_ptr<QwenVisionTower> QwenVisionTower::load(Backend& backend, const Component& text_encoder,
                                                       const WeightReader& reader, const Log& log) {
  Stopwatch load;
  auto binder = reader.binder(text_encoder, kTensorPrefix);
  auto tower = std::make_unique<QwenVisionTower>(backend, VisionConfig::from(text_encoder.config()), *binder);
  log.info("vision tower loaded ({} blocks, hidden {}) in {:.1f} s", tower->config().depth,
           tower->config().hidden_size, load.seconds());
  return tower;
}

std::vector<WeightSpec> QwenVisionTower::weight_specs(const VisionConfig& config, const std::string& prefix) {
  SpecRecorder recorder;
  Weights unused;
  bind(recorder, nullptr, config, unused);
  for (auto& s : recorder.specs) s.name = prefix + s.name;
  return recorder.specs;
}

namespace {

// Rows [part * n, (part + 1) * n) of a fused projection: q, k or v of attn.qkv.
Linear rows_of(const Linear& fused, int64_t part, int64_t n) {
  return {fused.weight.slice0(part * n, (part + 1) * n), fused.bias.slice0(part * n, (part + 1) * n)};
}

// The rows of x in window order: block j of `unit` rows is x's block window_index[j].
Tensor in_window_order(const Tensor& x, const std::vector<int64_t>& window_index, int64_t unit) {
  const int64_t cols = x.cols();
  const size_t block_bytes = static_cast<size_t>(unit * cols) * sizeof(float);
  Tensor out = Tensor::host(x.shape());
  for (size_t j = 0; j < window_index.size(); ++j)
    std::memcpy(out.data<float>() + static_cast<int64_t>(j) * unit * cols,
                x.data<float>() + window_index[j] * unit * cols, block_bytes);
  return out;
}

}  // namespace

void QwenVisionTower::attention_block(const Block& b, Tensor& x, const std::vector<int64_t>& segments,
                                      const Tensor& rope_cos, const Tensor& rope_sin) {
  const VisionConfig& c = config_;
  const int64_t N = x.rows(), heads = c.num_heads, Dh = c.head_dim();
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));
  Tensor h = be_.rms_norm(x, b.norm1, eps);                          // [N, hidden]
  Tensor q = rows_of(b.qkv, 0, c.hidden_size)(be_, h).view({N, heads, Dh});
  Tensor k = rows_of(b.qkv, 1, c.hidden_size)(be_, h).view({N, heads, Dh});
  Tensor v = rows_of(b.qkv, 2, c.hidden_size)(be_, h).view({N, heads, Dh});
  be_.rope_neox_(q, rope_cos, rope_sin);
  be_.rope_neox_(k, rope_cos, rope_sin);
  // Non-causal attention inside each segment (a window, or a whole image), none across.
  Tensor o = be_.empty({N, heads, Dh}, q.dtype());
  for (size_t s = 0; s + 1 < segments.size(); ++s) {
    const int64_t begin = segments[s], end = segments[s + 1];
    be_.attention(q.slice0(begin, end), k.slice0(begin, end), v.slice0(begin, end), scale, false,
                  o.slice0(begin, end));
  }
  be_.add_(x, b.proj(be_, o.view({N, c.hidden_size}), DType::F32));
}

Tensor QwenVisionTower::merge(const Tensor& x) {
  const VisionConfig& c = config_;
  const int64_t unit = c.merge_unit();
  Tensor normed = be_.rms_norm(x, w_.merger_ln_q, static_cast<float>(c.rms_norm_eps));  // [Np, hidden]
  // A merge block's patches are consecutive rows: one row of [Np / 4, 4 * hidden] each.
  Tensor blocks = normed.view({x.rows() / unit, c.hidden_size * unit});
  return w_.merger_fc2(be_, be_.gelu_erf(w_.merger_fc1(be_, blocks)), DType::F32);  // [Np / 4, out_hidden]
}

Tensor QwenVisionTower::forward(const Tensor& pixel_values, const std::vector<ImageGrid>& grids,
                                const BlockHook& hook) {
  const VisionConfig& c = config_;
  const VisionWindows windows = vision_windows(grids, c);
  const int64_t Np = windows.cu_seqlens.back(), unit = c.merge_unit();
  if (pixel_values.device() != Device::Host || pixel_values.shape() != Shape{Np, c.patch_dim()})
    fail_input("vision tower: pixel_values is {} on the {}; the {} image grids make host [{}, {}] "
               "({} patches of in_channels {} x temporal_patch_size {} x patch_size {}^2 values)",
               pixel_values.describe(), pixel_values.device() == Device::Host ? "host" : "device", grids.size(), Np,
               c.patch_dim(), Np, c.in_channels, c.temporal_patch_size, c.patch_size);
  // transformers permutes patch_embed's output rows into window order; patch_embed works row by
  // row, so permuting its input's rows is the same, and happens here on the host.
  const Tensor windowed = in_window_order(pixel_values.to_f32(), windows.window_index, unit);  // [Np, patch_dim]
  Tensor x = be_.linear(be_.upload(windowed, be_.act_dtype()), w_.patch_embed, nullptr, DType::F32);  // [Np, hidden]
  const VisionRope rope = vision_rope(grids, windows, c);
  const Tensor rope_cos = be_.upload(rope.cos, DType::F32), rope_sin = be_.upload(rope.sin, DType::F32);
  const float eps = static_cast<float>(c.rms_norm_eps);
  for (size_t k = 0; k < w_.blocks.size(); ++k) {
    const Block& b = w_.blocks[k];
    const bool full = c.full_attention(static_cast<int64_t>(k));
    attention_block(b, x, full ? windows.cu_seqlens : windows.cu_window_seqlens, rope_cos, rope_sin);
    Tensor m = be_.rms_norm(x, b.norm2, eps);
    be_.add_(x, b.down_proj(be_, be_.silu_mul(b.gate_proj(be_, m), b.up_proj(be_, m)), DType::F32));
    if (hook) hook(static_cast<int64_t>(k), x);
  }
  Tensor merged = merge(x);  // [Np / 4, out_hidden], window order
  // Back to raster order of the merged grid: token i is the merged row whose cell is i.
  const int64_t tokens = Np / unit;
  Tensor raster_rows = Tensor::host({tokens}, DType::I64);
  for (int64_t j = 0; j < tokens; ++j) raster_rows.data<int64_t>()[windows.window_index[static_cast<size_t>(j)]] = j;
  return be_.embedding(merged, raster_rows);  // [Np / 4, out_hidden] f32
}

}  // namespace ditbatch
