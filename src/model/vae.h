// The decoder of AutoencoderKLQwenImage (a Wan-VAE) for single images: spec qwen-image.md §5.
// Activations are NHWC ([H, W, C], one image): a 3x3 conv is then an im2col GEMM, the RMS
// norm over channels is a row op and the mid-block attention reads pixels as tokens.
#pragma once

#include <vector>

#include "core/backend.h"
#include "io/weight_store.h"
#include "model/vae_blocks.h"
#include "model/weights.h"

namespace ditbatch {

struct VaeConfig {
  int64_t base_dim = 96;
  int64_t z_dim = 16;
  std::vector<int64_t> dim_mult = {1, 2, 4, 4};
  int64_t num_res_blocks = 2;
  std::vector<int64_t> temperal_downsample = {0, 1, 1};  // bools
  std::vector<float> latents_mean, latents_std;           // [z_dim] each
  static VaeConfig from(const Config& config);
  // The decoder's up blocks (one per dim_mult entry) and their resnets (num_res_blocks + 1 each).
  std::vector<BlockCount> block_counts() const {
    return {{"len(dim_mult)", static_cast<int64_t>(dim_mult.size()), "decoder.up_blocks."},
            {"num_res_blocks + 1", num_res_blocks + 1, "decoder.up_blocks.0.resnets."}};
  }

  // Channel widths of the decoder: [base*mult[-1]] + [base*m for m in reversed(mult)].
  std::vector<int64_t> decoder_dims() const;
  // Channel widths of the encoder: base * m for m in [1] + dim_mult.
  std::vector<int64_t> encoder_dims() const;
  int64_t spatial_scale() const { return int64_t{1} << temperal_downsample.size(); }  // 8
};

class VaeDecoder {
 public:
  VaeDecoder(Backend& backend, const Component& component);
  // Weights from any binder (random weights for benchmarks, regenerated weights in tests).
  VaeDecoder(Backend& backend, const VaeConfig& config, WeightBinder& binder);
  VaeDecoder(Backend& backend, const VaeConfig& config, WeightBinder&& binder) : VaeDecoder(backend, config, binder) {}
  static std::vector<WeightSpec> weight_specs(const VaeConfig& config);
  // Multiply-adds x 2 of one decode of a height x width image: every convolution and the mid
  // block's attention over all latent pixels (which grows with the square of the image area).
  static double decode_flops(const VaeConfig& config, int64_t height, int64_t width);
  const VaeConfig& config() const { return config_; }

  // packed: the sampler's latents of one image as it leaves them, [h * w, 4 * z_dim] (f32, backend)
  // for a grid of h x w tokens. Unpacks and de-normalises them on the backend
  // (z = latents / (1/std) + mean, spec §2.6) and decodes: -> [16h, 16w, 3] (backend), in [-1, 1].
  Tensor decode_latents(const Tensor& packed, int64_t h, int64_t w);
  // The first half of decode_latents: the decoder's NHWC input [2h, 2w, z_dim] (act dtype).
  Tensor denormalized_latents(const Tensor& packed, int64_t h, int64_t w);
  // z: an already de-normalised latent [z_dim, h, w] on the host (diffusers' layout, frame axis
  // dropped, as the goldens store it) -> [8h, 8w, 3] (backend), clamped to [-1, 1].
  Tensor decode(const Tensor& z);
  // One stage of decode(), for tests and debugging: up_blocks[index] on NHWC x.
  Tensor run_up_block(size_t index, const Tensor& x);

 private:
  struct UpBlock {
    std::vector<VaeResBlock> resnets;
    bool has_upsampler = false;
    VaeConv upsample_conv;
  };
  struct Weights {
    VaeTrunk trunk;
    std::vector<UpBlock> up_blocks;
  };
  static void bind(WeightBinder& binder, Backend* be, const VaeConfig& c, Weights& w);
  Tensor up_block(const UpBlock& up, Tensor x);
  Tensor decode_nhwc(Tensor x);  // x [h, w, z_dim] on the backend

  Backend& be_;
  VaeOps ops_;
  VaeConfig config_;
  Weights w_;
  Tensor latents_divisor_, latents_mean_;  // f32 [z_dim] on the backend: 1/std (diffusers' divisor) and mean
};

}  // namespace ditbatch
