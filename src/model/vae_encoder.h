// The encoder of AutoencoderKLQwenImage for one image (the Edit pipelines' image latents): spec
// qwen-image-edit.md §8. The same NHWC pieces as the decoder (model/vae_blocks.h); what is the
// encoder's own is the flat down_blocks list with its stride-2 resamples, quant_conv and the
// normalisation of the posterior mode, (z - mean) / std.
#pragma once

#include <vector>

#include "core/backend.h"
#include "io/weight_store.h"
#include "model/vae.h"
#include "model/vae_blocks.h"
#include "model/weights.h"

namespace ditbatch {

class VaeEncoder {
 public:
  // The weights of a weight file's vae component, or from any binder (random weights for
  // benchmarks, regenerated weights in tests).
  VaeEncoder(Backend& backend, const Component& vae);
  VaeEncoder(Backend& backend, const VaeConfig& config, WeightBinder& binder);
  const VaeConfig& config() const { return config_; }
  // encoder.* and quant_conv.*: what an Edit pipeline's VAE holds besides the decoder's tensors.
  static std::vector<WeightSpec> weight_specs(const VaeConfig& config);

  // image: host f32 [3, h, w] in [-1, 1] (the VAE preprocess; diffusers' layout with the batch
  // and frame axes dropped), h and w positive multiples of 8 -> the normalised posterior mode
  // (z - latents_mean) / latents_std, NHWC f32 [h/8, w/8, z_dim] on the backend.
  Tensor encode(const Tensor& image);
  // The same 2x2-packed as the transformer reads image tokens, exactly like the noise
  // (model/latent_packing.h): h and w multiples of 16 -> f32 [(h/16) * (w/16), 4 * z_dim].
  Tensor encode_packed(const Tensor& image);

  // The stages of encode(), for tests and debugging, each on NHWC activations on the backend.
  // [h, w, 3] host image -> [h, w, 3] (act dtype, backend)
  Tensor upload_image(const Tensor& image);
  Tensor run_conv_in(const Tensor& x);
  size_t down_block_count() const { return w_.down_blocks.size(); }
  Tensor run_down_block(size_t index, const Tensor& x);
  Tensor run_mid_block(const Tensor& x);
  // conv_out(SiLU(RMS(x))): [h, w, 2 * z_dim], mean then log-variance.
  Tensor run_head(const Tensor& x);
  // quant_conv of the head's output: the posterior's moments [h, w, 2 * z_dim].
  Tensor moments(const Tensor& head_out);

 private:
  // One entry of the flat encoder.down_blocks list: a residual block or a resample (down2d /
  // down3d: ZeroPad2d(0, 1, 0, 1) then a stride-2 3x3 conv; a single image skips time_conv).
  struct DownLayer {
    bool is_resample = false;
    VaeResBlock residual;
    VaeConv resample;
  };
  struct Weights {
    VaeConv conv_in, conv_out, quant_conv, quant_conv_mean;  // quant_conv_mean: its first z_dim outputs
    std::vector<DownLayer> down_blocks;
    VaeResBlock mid0, mid1;
    VaeAttention attention;
    Tensor norm_out;
  };
  static void bind(WeightBinder& binder, Backend* be, const VaeConfig& c, Weights& w);
  void load(WeightBinder& binder);
  Tensor normalized_mode(const Tensor& head_out);

  Backend& be_;
  VaeOps ops_;
  VaeConfig config_;
  Weights w_;
  Tensor neg_latents_mean_, latents_std_;  // f32 [z_dim] on the backend
};

}  // namespace ditbatch
