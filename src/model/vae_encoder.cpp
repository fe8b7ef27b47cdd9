#include "model/vae_encoder.h"

#include "core/error.h"
#include "model/latent_packing.h"

namespace ditbatch {

void VaeEncoder::bind(WeightBinder& b, Backend* be, const VaeConfig& c, Weights& w) {
  const auto dims = c.encoder_dims();  // [96, 96, 192, 384, 384] at base_dim 96
  const VaeBinder vb{b, be,
                     fmt::format("base_dim {}, dim_mult {}, z_dim {}", c.base_dim, shape_str(c.dim_mult), c.z_dim)};
  // One frame meets only the last temporal slice of a causal 3-D conv: the decoder's rule.
  w.conv_in = vb.conv("encoder.conv_in", dims[0], 3, 3, true);
  const size_t levels = c.dim_mult.size();
  for (size_t i = 0; i < levels; ++i) {
    int64_t in = dims[i];
    const int64_t out = dims[i + 1];
    for (int64_t r = 0; r < c.num_res_blocks; ++r, in = out) {
      DownLayer layer;
      layer.residual = vb.residual(fmt::format("encoder.down_blocks.{}.", w.down_blocks.size()), in, out, true);
      w.down_blocks.push_back(std::move(layer));
    }
    if (i + 1 == levels) break;
    const std::string p = fmt::format("encoder.down_blocks.{}.", w.down_blocks.size());
    DownLayer layer;
    layer.is_resample = true;
    layer.resample = vb.conv(p + "resample.1", out, out, 3, false);
    // downsample3d's time_conv runs from the second chunk of frames on: a single image never
    // reaches it (make-tiny writes it, convert checks it).
    if (c.temperal_downsample[i] && b.recording()) {
      b.bind(p + "time_conv.weight", {out, out, 3, 1, 1}, WeightInit::Matrix, vb.why);
      b.bind(p + "time_conv.bias", {out}, WeightInit::Bias, vb.why);
    }
    w.down_blocks.push_back(std::move(layer));
  }
  const int64_t width = dims.back(), moments = 2 * c.z_dim;
  w.mid0 = vb.residual("encoder.mid_block.resnets.0.", width, width, true);
  w.attention = vb.attention("encoder.mid_block.attentions.0.", width);
  w.mid1 = vb.residual("encoder.mid_block.resnets.1.", width, width, true);
  w.norm_out = vb.gamma("encoder.norm_out.gamma", width, {1, 1, 1});
  w.conv_out = vb.conv("encoder.conv_out", moments, width, 3, true);
  w.quant_conv = vb.conv("quant_conv", moments, moments, 1, true);
  // The posterior's mode is its mean, the first z_dim channels of the moments: only those
  // outputs of quant_conv are computed on the encode path.
  if (w.quant_conv.weight.defined()) {
    w.quant_conv_mean.weight = w.quant_conv.weight.slice0(0, c.z_dim);
    w.quant_conv_mean.bias = w.quant_conv.bias.slice0(0, c.z_dim);
  }
}

VaeEncoder::VaeEncoder(Backend& backend, const Component& vae)
    : be_(backend), ops_(backend), config_(VaeConfig::from(vae.config())) {
  ComponentLoader loader(vae);
  load(loader);
}

VaeEncoder::VaeEncoder(Backend& backend, const VaeConfig& config, WeightBinder& binder)
    : be_(backend), ops_(backend), config_(config) {
  load(binder);
}

void VaeEncoder::load(WeightBinder& binder) {
  bind(binder, &be_, config_, w_);
  // z - mean as z + (-mean): negation is exact, so the sum rounds as the difference does.
  std::vector<float> neg_mean;
  for (float m : config_.latents_mean) neg_mean.push_back(-m);
  neg_latents_mean_ = be_.upload(Tensor::host_f32({config_.z_dim}, neg_mean), DType::F32);
  latents_std_ = be_.upload(Tensor::host_f32({config_.z_dim}, config_.latents_std), DType::F32);
}

std::vector<WeightSpec> VaeEncoder::weight_specs(const VaeConfig& config) {
  return recorded_specs(bind, config);
}

Tensor VaeEncoder::upload_image(const Tensor& image) {
  const int64_t scale = config_.spatial_scale();
  DITBATCH_CHECK(
      image.rank() == 3 && image.dim(0) == 3 && image.dtype() == DType::F32 && image.device() == Device::Host &&
          image.dim(1) > 0 && image.dim(2) > 0 && image.dim(1) % scale == 0 && image.dim(2) % scale == 0,
      "vae encode: image {} (expected host f32 [3, h, w], h and w positive multiples of {})", image.describe(), scale);
  const int64_t h = image.dim(1), w = image.dim(2);
  Tensor nhwc = Tensor::host({h, w, 3});  // [3, h, w] -> [h, w, 3]
  for (int64_t ch = 0; ch < 3; ++ch)
    for (int64_t i = 0; i < h * w; ++i) nhwc.data<float>()[i * 3 + ch] = image.data<float>()[ch * h * w + i];
  return be_.upload(nhwc, be_.act_dtype());
}

Tensor VaeEncoder::run_conv_in(const Tensor& x) {
  return ops_.conv3x3(w_.conv_in, x);
}

Tensor VaeEncoder::run_down_block(size_t index, const Tensor& x) {
  DITBATCH_CHECK(index < w_.down_blocks.size(), "vae encoder: down block {} of {}", index, w_.down_blocks.size());
  const DownLayer& layer = w_.down_blocks[index];
  if (!layer.is_resample) return ops_.residual(layer.residual, x);
  return be_.conv2d_3x3_stride2(x, layer.resample.weight, layer.resample.bias);  // [H/2, W/2, C]
}

Tensor VaeEncoder::run_mid_block(const Tensor& x) {
  return ops_.residual(w_.mid1, ops_.attention(w_.attention, ops_.residual(w_.mid0, x)));
}

Tensor VaeEncoder::run_head(const Tensor& x) {
  return ops_.conv3x3(w_.conv_out, be_.silu(ops_.rms_norm(x, w_.norm_out)));  // [h, w, 2 * z_dim]
}

Tensor VaeEncoder::moments(const Tensor& head_out) {
  return ops_.conv1x1(w_.quant_conv, head_out);
}

Tensor VaeEncoder::normalized_mode(const Tensor& head_out) {
  Tensor mode = ops_.conv1x1(w_.quant_conv_mean, head_out);  // [h, w, z_dim]
  if (mode.dtype() != DType::F32) mode = be_.cast(mode, DType::F32);
  // (z - mean) / std per channel, a true division as the Edit pipelines write it (not * 1/std).
  be_.add_(mode, neg_latents_mean_);
  be_.div_(mode, latents_std_);
  return mode;
}

Tensor VaeEncoder::encode(const Tensor& image) {
  Tensor x = run_conv_in(upload_image(image));
  for (size_t i = 0; i < w_.down_blocks.size(); ++i) x = run_down_block(i, x);
  return normalized_mode(run_head(run_mid_block(x)));  // [h/8, w/8, z_dim]
}

Tensor VaeEncoder::encode_packed(const Tensor& image) {
  const int64_t multiple = 2 * config_.spatial_scale();
  DITBATCH_CHECK(image.rank() == 3 && image.dim(1) % multiple == 0 && image.dim(2) % multiple == 0,
                 "vae encode: image {} (expected [3, h, w], h and w multiples of {}: the latents pack in 2x2 patches)",
                 image.describe(), multiple);
  const Tensor z = encode(image);                       // [h/8, w/8, z_dim]
  return pack_latents(be_, be_.permute(z, {2, 0, 1}));  // [(h/16) * (w/16), 4 * z_dim]
}

}  // namespace ditbatch
