#include "model/vae.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/latent_packing.h"

namespace ditbatch {

VaeConfig VaeConfig::from(const Config& comp) {
  VaeConfig c;
  c.base_dim = comp.get_int("base_dim", 1, kMaxConfigWidth);
  c.z_dim = comp.get_int("z_dim", 1, kMaxConfigWidth);
  c.dim_mult = comp.get_ints("dim_mult");
  c.num_res_blocks = comp.get_int("num_res_blocks", 0, kMaxConfigDepth);
  c.temperal_downsample = comp.get_ints("temperal_downsample");
  if (comp.has("attn_scales") && !comp.get_ints("attn_scales").empty())
    fail_input("{}: attn_scales must be empty (Qwen-Image's VAE has attention only in the mid block)", comp.where());
  check_vae_levels(comp, c.dim_mult, c.temperal_downsample, c.base_dim, "base_dim");
  read_vae_latent_stats(comp, c.z_dim, c.latents_mean, c.latents_std);
  return c;
}

std::vector<int64_t> VaeConfig::decoder_dims() const {
  std::vector<int64_t> dims = {base_dim * dim_mult.back()};
  for (auto it = dim_mult.rbegin(); it != dim_mult.rend(); ++it) dims.push_back(base_dim * *it);
  return dims;
}

std::vector<int64_t> VaeConfig::encoder_dims() const {
  std::vector<int64_t> dims = {base_dim};
  for (int64_t m : dim_mult) dims.push_back(base_dim * m);
  return dims;
}

void VaeDecoder::bind(WeightBinder& b, Backend* be, const VaeConfig& c, Weights& w) {
  const auto dims = c.decoder_dims();
  const VaeBinder vb{b, be, fmt::format("base_dim {}, dim_mult {}, z_dim {}", c.base_dim, shape_str(c.dim_mult), c.z_dim)};
  const std::string& why = vb.why;
  vb.trunk_front(w.trunk, c.z_dim, dims[0], true);
  const size_t n_up = c.dim_mult.size();
  for (size_t i = 0; i < n_up; ++i) {
    // An up block after an upsampler starts from half its predecessor's width (diffusers' in_dim // 2).
    const int64_t in = i == 0 ? dims[i] : dims[i] / 2, out = dims[i + 1];
    UpBlock up;
    int64_t current = in;
    for (int64_t r = 0; r <= c.num_res_blocks; ++r) {
      up.resnets.push_back(vb.residual(fmt::format("decoder.up_blocks.{}.resnets.{}.", i, r), current, out, true));
      current = out;
    }
    up.has_upsampler = i + 1 != n_up;
    if (up.has_upsampler) {
      const std::string p = fmt::format("decoder.up_blocks.{}.upsamplers.0.", i);
      up.upsample_conv = vb.conv(p + "resample.1", out / 2, out, 3, false);
      // upsample3d's time_conv doubles frames: a single image never reaches it (make-tiny writes it).
      if (c.temperal_downsample[n_up - 2 - i] && b.recording()) {
        b.bind(p + "time_conv.weight", {2 * out, out, 3, 1, 1}, WeightInit::Matrix, why);
        b.bind(p + "time_conv.bias", {2 * out}, WeightInit::Bias, why);
      }
    }
    w.up_blocks.push_back(std::move(up));
  }
  vb.trunk_head(w.trunk, dims.back(), 3, true);
}

double VaeDecoder::decode_flops(const VaeConfig& c, int64_t height, int64_t width) {
  // The layers of bind() and decode_nhwc(), at the resolution each runs at.
  const auto dims = c.decoder_dims();
  double pixels = static_cast<double>(height / 8) * static_cast<double>(width / 8);
  auto conv = [&](double in, double out, double k) { return 2.0 * in * out * k * k * pixels; };
  auto res = [&](double in, double out) { return conv(in, out, 3) + conv(out, out, 3) + (in != out ? conv(in, out, 1) : 0.0); };
  const auto d0 = static_cast<double>(dims[0]), z = static_cast<double>(c.z_dim);
  double flops = conv(z, z, 1) + conv(z, d0, 3) + 2.0 * res(d0, d0);
  flops += 4.0 * conv(d0, d0, 1) + 2.0 * 2.0 * pixels * pixels * d0;  // q, k, v, proj; QK^T and PV
  for (size_t i = 0; i < c.dim_mult.size(); ++i) {
    double current = static_cast<double>(i == 0 ? dims[i] : dims[i] / 2);
    const auto out = static_cast<double>(dims[i + 1]);
    for (int64_t r = 0; r <= c.num_res_blocks; ++r, current = out) flops += res(current, out);
    if (i + 1 != c.dim_mult.size()) {
      pixels *= 4.0;
      flops += conv(out, out / 2, 3);
    }
  }
  return flops + conv(static_cast<double>(dims.back()), 3, 3);
}

VaeDecoder::VaeDecoder(Backend& backend, const Component& component)
    : VaeDecoder(backend, VaeConfig::from(component.config()), ComponentLoader(component)) {}

VaeDecoder::VaeDecoder(Backend& backend, const VaeConfig& config, WeightBinder& binder)
    : be_(backend), ops_(backend), config_(config) {
  bind(binder, &be_, config_, w_);
  const int64_t C = config_.z_dim;
  DITBATCH_CHECK(static_cast<int64_t>(config_.latents_std.size()) == C &&
                     static_cast<int64_t>(config_.latents_mean.size()) == C,
                 "vae: latents_mean/latents_std must have z_dim = {} values", C);
  Tensor divisor = Tensor::host({C}), mean = Tensor::host_f32({C}, config_.latents_mean);
  // diffusers divides by the reciprocal of std (latents / (1/std)), which is not x * std.
  for (int64_t c = 0; c < C; ++c) divisor.data<float>()[c] = 1.0f / config_.latents_std[static_cast<size_t>(c)];
  latents_divisor_ = be_.upload(divisor, DType::F32);
  latents_mean_ = be_.upload(mean, DType::F32);
}

std::vector<WeightSpec> VaeDecoder::weight_specs(const VaeConfig& config) {
  SpecRecorder recorder;
  Weights unused;
  bind(recorder, nullptr, config, unused);
  return recorder.specs;
}

Tensor VaeDecoder::up_block(const UpBlock& up, Tensor x) {
  for (const VaeResBlock& r : up.resnets) x = ops_.residual(r, x);
  if (up.has_upsampler) x = ops_.conv3x3(up.upsample_conv, be_.upsample_nearest2x(x));
  return x;
}

Tensor VaeDecoder::run_up_block(size_t index, const Tensor& x) {
  DITBATCH_CHECK(index < w_.up_blocks.size(), "vae: up block {} of {}", index, w_.up_blocks.size());
  return up_block(w_.up_blocks[index], x);
}

Tensor VaeDecoder::denormalized_latents(const Tensor& packed, int64_t h, int64_t w) {
  DITBATCH_CHECK(packed.rank() == 2 && packed.dim(1) == 4 * config_.z_dim && packed.dtype() == DType::F32,
                 "vae decode: latents {} (expected f32 [h * w, {}])", packed.describe(), 4 * config_.z_dim);
  Tensor z = unpack_latents_nhwc(be_, packed, h, w);  // [2h, 2w, z_dim] f32
  // The de-normalisation as diffusers writes it: latents / (1 / std) + mean, rounded in f32.
  be_.div_(z, latents_divisor_);
  be_.add_(z, latents_mean_);
  return z.dtype() == be_.act_dtype() ? z : be_.cast(z, be_.act_dtype());
}

Tensor VaeDecoder::decode_latents(const Tensor& packed, int64_t h, int64_t w) {
  return decode_nhwc(denormalized_latents(packed, h, w));
}

Tensor VaeDecoder::decode(const Tensor& z) {
  DITBATCH_CHECK(z.rank() == 3 && z.dim(0) == config_.z_dim && z.device() == Device::Host,
                 "vae decode: z {} (expected host [{}, h, w])", z.describe(), config_.z_dim);
  const int64_t C = z.dim(0), h = z.dim(1), w = z.dim(2);
  // [C, h, w] -> NHWC [h, w, C]
  Tensor nhwc = Tensor::host({h, w, C});
  const Tensor zf = z.to_f32();
  for (int64_t ch = 0; ch < C; ++ch)
    for (int64_t i = 0; i < h * w; ++i) nhwc.data<float>()[i * C + ch] = zf.data<float>()[ch * h * w + i];
  return decode_nhwc(be_.upload(nhwc, be_.act_dtype()));
}

Tensor VaeDecoder::decode_nhwc(Tensor x) {
  x = ops_.front(w_.trunk, x);
  for (const UpBlock& up : w_.up_blocks) x = up_block(up, x);
  return ops_.head(w_.trunk, x);  // [8h, 8w, 3]
}

}  // namespace ditbatch
