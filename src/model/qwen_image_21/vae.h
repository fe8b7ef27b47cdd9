// The decoder of AutoencoderKLQwenImage21 (Qwen-Image-2.1's VAE) for single images: spec
// qwen-image-2.1.md §7.2. The Wan-VAE pieces of Qwen-Image's decoder (model/vae_blocks.h) with
// 2-D convolutions, five levels (x16), three resnets a level, upsamplers that keep the width,
// the DupUp3D shortcut around each upsampling level, and 4 output channels (RGBA). NHWC.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "io/config.h"
#include "model/vae_blocks.h"
#include "model/weights.h"

namespace ditbatch {

struct Vae21Config {
  int64_t decoder_base_dim = 144, z_dim = 64, out_channels = 4;
  std::vector<int64_t> dim_mult = {1, 2, 4, 8, 8};
  int64_t num_res_blocks = 2;
  std::vector<int64_t> temperal_downsample = {0, 1, 1, 1};  // bools; the decoder upsamples in reverse order
  std::vector<float> latents_mean, latents_std;             // [z_dim] each
  // vae/config.json; refuses what the decoder does not implement (is_residual false, a patch
  // size, attention outside the mid block).
  static Vae21Config from(const Config& config);
  // Widths: [dbd * mult[-1]] + [dbd * m for m in reversed(mult)] (1152, 1152, 1152, 576, 288, 144).
  std::vector<int64_t> decoder_dims() const;
  int64_t spatial_scale() const { return int64_t{1} << (dim_mult.size() - 1); }  // 16
  std::vector<BlockCount> block_counts() const {
    return {{"len(dim_mult)", static_cast<int64_t>(dim_mult.size()), "decoder.up_blocks."},
            {"num_res_blocks + 1", num_res_blocks + 1, "decoder.up_blocks.0.resnets."}};
  }
};

class QwenImage21VaeDecoder {
 public:
  QwenImage21VaeDecoder(Backend& backend, const Vae21Config& config, WeightBinder& binder);
  QwenImage21VaeDecoder(Backend& backend, const Vae21Config& config, WeightBinder&& binder)
      : QwenImage21VaeDecoder(backend, config, binder) {}
  static std::vector<WeightSpec> weight_specs(const Vae21Config& config);
  // The multiply-adds x 2 of decoding one height x width image (the convolutions and the mid
  // block's attention), for the time estimates.
  static double decode_flops(const Vae21Config& config, int64_t height, int64_t width);
  const Vae21Config& config() const { return config_; }

  // packed: the sampler's latents of one image, [h * w, z_dim] (f32, backend), a plain flatten
  // of the h x w grid, which is NHWC already. De-normalised as diffusers writes it,
  // z * std + mean (two rounded f32 ops), in the act dtype: [h, w, z_dim].
  Tensor denormalized_latents(const Tensor& packed, int64_t h, int64_t w);
  // Called with ("mid", x) after the mid block and ("up_<i>", x) after each up block (NHWC).
  using StageHook = std::function<void(const std::string&, const Tensor&)>;
  // z [h, w, z_dim] (backend) -> [16h, 16w, out_channels] (backend), clamped to [-1, 1].
  Tensor decode(const Tensor& z, const StageHook& hook = nullptr);
  Tensor decode_latents(const Tensor& packed, int64_t h, int64_t w) { return decode(denormalized_latents(packed, h, w)); }

 private:
  struct UpBlock {
    std::vector<VaeResBlock> resnets;
    bool has_upsampler = false;
    VaeConv upsample_conv;
    int64_t shortcut_frames = 1;  // DupUp3D's factor_t: 2 where the level upsamples in time
  };
  struct Weights {
    VaeTrunk trunk;
    std::vector<UpBlock> up_blocks;
  };
  static void bind(WeightBinder& binder, Backend* be, const Vae21Config& c, Weights& w);
  Tensor up_block(const UpBlock& up, const Tensor& x);
  // QwenImage21DupUp3D for one frame (its first chunk: the last temporal slice): x [h, w, Cin]
  // -> [2h, 2w, Cout], out[2y+dy, 2x+dx, o] = x[y, x, (o 4 ft + (ft-1) 4 + 2dy + dx) / r] with
  // r = Cout 4 ft / Cin.
  Tensor dup_up(const Tensor& x, int64_t out_channels, int64_t frames);

  Backend& be_;
  VaeOps ops_;
  Vae21Config config_;
  Weights w_;
  Tensor latents_std_, latents_mean_;  // f32 [z_dim] on the backend
};

}  // namespace ditbatch
