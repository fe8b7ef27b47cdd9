// The Wan-VAE pieces both Qwen-Image decoders are made of (Qwen-Image's and Qwen-Image-2.1's),
// on one image in NHWC ([H, W, C]): a 3x3 conv is then an im2col GEMM, the RMS norm over the
// channels a row op, and the attention block's tokens the pixels. Names and shapes as in
// diffusers' state dicts.
#pragma once

#include <string>
#include <vector>

#include "core/backend.h"
#include "io/config.h"
#include "model/weights.h"

namespace ditbatch {

struct VaeConv {  // a 3x3 conv as [Cout, 9*Cin] in (ky, kx, cin) order, or a 1x1 conv as [Cout, Cin]
  Tensor weight, bias;
};
struct VaeResBlock {
  Tensor norm1, norm2;  // gamma [C]
  VaeConv conv1, conv2;
  bool has_shortcut = false;
  VaeConv shortcut;
};
struct VaeAttention {  // one head over all pixels
  Tensor norm;  // gamma [C]
  VaeConv q, k, v, proj;  // to_qkv split into its channel thirds
};
// What both decoders have around their up blocks: post_quant_conv, conv_in and the mid block
// (resnet, attention, resnet) before them; norm_out and conv_out after.
struct VaeTrunk {
  VaeConv post_quant_conv, conv_in, conv_out;
  VaeResBlock mid0, mid1;
  VaeAttention attention;
  Tensor norm_out;
};

// A VAE config's latents_mean and latents_std: z_dim values each, the std positive.
void read_vae_latent_stats(const Config& config, int64_t z_dim, std::vector<float>& mean, std::vector<float>& std);
// A VAE config's levels: len(dim_mult) - 1 temporal flags, 2 to 8 levels, widths base * m in
// 1..kMaxConfigWidth (base_key names the base width's key).
void check_vae_levels(const Config& config, const std::vector<int64_t>& dim_mult,
                      const std::vector<int64_t>& temperal_downsample, int64_t base, const char* base_key);

// Binds the pieces by name; `why` names the config values that imply the shapes. causal3d: the
// checkpoint stores a conv as a causal 3-D kernel [out, in, k, k, k] (Qwen-Image), of which one
// frame meets only the last temporal slice; else as [out, in, k, k] (Qwen-Image-2.1).
struct VaeBinder {
  WeightBinder& binder;
  Backend* be;
  std::string why;

  VaeConv conv(const std::string& name, int64_t out, int64_t in, int64_t k, bool causal3d) const;
  // A gain stored as [ch, 1, ...] (tail: the trailing ones), kept as [ch].
  Tensor gamma(const std::string& name, int64_t ch, const Shape& tail) const;
  // "<prefix>norm1.gamma", conv1, norm2, conv2 and, where in != out, a 1x1 conv_shortcut.
  VaeResBlock residual(const std::string& prefix, int64_t in, int64_t out, bool causal3d) const;
  // "<prefix>norm.gamma", to_qkv (1x1, 2-D), proj (1x1, 2-D).
  VaeAttention attention(const std::string& prefix, int64_t ch) const;
  // The trunk in file order: front before the up blocks (post_quant_conv, decoder.conv_in to
  // `width`, the mid block), head after them (decoder.norm_out, decoder.conv_out to out_channels).
  void trunk_front(VaeTrunk& trunk, int64_t z_dim, int64_t width, bool causal3d) const;
  void trunk_head(VaeTrunk& trunk, int64_t width, int64_t out_channels, bool causal3d) const;
};

class VaeOps {
 public:
  explicit VaeOps(Backend& backend) : be_(backend) {}
  Tensor conv3x3(const VaeConv& conv, const Tensor& x) const;
  Tensor conv1x1(const VaeConv& conv, const Tensor& x) const;
  // RMS_norm: F.normalize over the channels, times sqrt(C) (python's C**0.5, as f32) and gamma.
  Tensor rms_norm(const Tensor& x, const Tensor& gamma) const;
  // shortcut(x) + conv2(SiLU(RMS(conv1(SiLU(RMS(x)))))).
  Tensor residual(const VaeResBlock& block, const Tensor& x) const;
  // x + proj(attention(q, k, v of RMS(x))), one head, scale 1/sqrt(C).
  Tensor attention(const VaeAttention& block, const Tensor& x) const;
  // post_quant_conv, conv_in and the mid block, of z [h, w, z_dim].
  Tensor front(const VaeTrunk& trunk, const Tensor& z) const;
  // conv_out(SiLU(RMS(x))), clamped to [-1, 1].
  Tensor head(const VaeTrunk& trunk, const Tensor& x) const;

 private:
  Backend& be_;
};

}  // namespace ditbatch
