#include "model/qwen_image_21/vae.h"

#include "core/error.h"
#include "io/json_text.h"

namespace ditbatch {

Vae21Config Vae21Config::from(const Config& comp) {
  Vae21Config c;
  if (comp.has("is_residual") && !comp.get_bool("is_residual"))
    fail_input("{}: is_residual false is not implemented (Qwen-Image-2.1's decoder is residual)", comp.where());
  if (comp.has("patch_size") && !comp.json()["patch_size"].is_null())
    fail_input("{}: patch_size {} is not implemented (Qwen-Image-2.1's VAE has none)", comp.where(),
               json_excerpt(comp.json()["patch_size"]));
  if (comp.has("attn_scales") && !comp.get_ints("attn_scales").empty())
    fail_input("{}: attn_scales must be empty (attention only in the mid block)", comp.where());
  c.decoder_base_dim = comp.get_int(comp.has("decoder_base_dim") ? "decoder_base_dim" : "base_dim", 1, kMaxConfigWidth);
  c.z_dim = comp.get_int("z_dim", 1, kMaxConfigWidth);
  c.out_channels = comp.has("out_channels") ? comp.get_int("out_channels", 1, 64) : 4;
  c.dim_mult = comp.get_ints("dim_mult");
  c.num_res_blocks = comp.get_int("num_res_blocks", 0, kMaxConfigDepth);
  c.temperal_downsample = comp.get_ints("temperal_downsample");
  check_vae_levels(comp, c.dim_mult, c.temperal_downsample, c.decoder_base_dim, "decoder_base_dim");
  read_vae_latent_stats(comp, c.z_dim, c.latents_mean, c.latents_std);
  // DupUp3D moves whole channels: each level's width must divide its predecessor's.
  const auto dims = c.decoder_dims();
  for (size_t i = 0; i + 2 < dims.size(); ++i)
    if (dims[i + 1] > dims[i] || dims[i] % dims[i + 1] != 0)
      fail_input("{}: decoder widths {} must each divide the one before (DupUp3D's channel groups)", comp.where(),
                 shape_str(dims));
  return c;
}

std::vector<int64_t> Vae21Config::decoder_dims() const {
  std::vector<int64_t> dims = {decoder_base_dim * dim_mult.back()};
  for (auto it = dim_mult.rbegin(); it != dim_mult.rend(); ++it) dims.push_back(decoder_base_dim * *it);
  return dims;
}

void QwenImage21VaeDecoder::bind(WeightBinder& b, Backend* be, const Vae21Config& c, Weights& w) {
  const auto dims = c.decoder_dims();
  const VaeBinder vb{b, be, fmt::format("decoder_base_dim {}, dim_mult {}, z_dim {}", c.decoder_base_dim,
                                        shape_str(c.dim_mult), c.z_dim)};
  vb.trunk_front(w.trunk, c.z_dim, dims[0], false);
  const size_t n_up = c.dim_mult.size();
  for (size_t i = 0; i < n_up; ++i) {
    const int64_t in = dims[i], out = dims[i + 1];  // the upsampler keeps the width: no halving
    UpBlock up;
    for (int64_t r = 0; r <= c.num_res_blocks; ++r)
      up.resnets.push_back(vb.residual(fmt::format("decoder.up_blocks.{}.resnets.{}.", i, r), r == 0 ? in : out, out,
                                       false));
    up.has_upsampler = i + 1 != n_up;
    if (up.has_upsampler) {
      const std::string p = fmt::format("decoder.up_blocks.{}.upsampler.", i);
      up.upsample_conv = vb.conv(p + "resample.1", out, out, 3, false);
      const bool in_time = c.temperal_downsample[n_up - 2 - i] != 0;
      up.shortcut_frames = in_time ? 2 : 1;
      // upsample3d's time_conv doubles frames: a single image never reaches it (make-tiny writes it).
      if (in_time && b.recording()) {
        b.bind(p + "time_conv.weight", {2 * out, out, 1, 1}, WeightInit::Matrix, vb.why);
        b.bind(p + "time_conv.bias", {2 * out}, WeightInit::Bias, vb.why);
      }
    }
    w.up_blocks.push_back(std::move(up));
  }
  vb.trunk_head(w.trunk, dims.back(), c.out_channels, false);
}

double QwenImage21VaeDecoder::decode_flops(const Vae21Config& c, int64_t height, int64_t width) {
  // The layers of bind() at the resolution each runs at: the trunk's front and mid block at the
  // latent grid, each up level's resnets, its upsampler's conv at twice the size, the head.
  const auto dims = c.decoder_dims();
  double pixels = static_cast<double>(height / c.spatial_scale()) * static_cast<double>(width / c.spatial_scale());
  auto conv = [&](double in, double out, double k) { return 2.0 * in * out * k * k * pixels; };
  auto res = [&](double in, double out) { return conv(in, out, 3) + conv(out, out, 3) + (in != out ? conv(in, out, 1) : 0.0); };
  const auto d0 = static_cast<double>(dims[0]), z = static_cast<double>(c.z_dim);
  double flops = conv(z, z, 1) + conv(z, d0, 3) + 2.0 * res(d0, d0);
  flops += 4.0 * conv(d0, d0, 1) + 2.0 * 2.0 * pixels * pixels * d0;  // q, k, v, proj; QK^T and PV
  for (size_t i = 0; i < c.dim_mult.size(); ++i) {
    const auto in = static_cast<double>(dims[i]), out = static_cast<double>(dims[i + 1]);
    for (int64_t r = 0; r <= c.num_res_blocks; ++r) flops += res(r == 0 ? in : out, out);
    if (i + 1 != c.dim_mult.size()) {
      pixels *= 4.0;
      flops += conv(out, out, 3);
    }
  }
  return flops + conv(static_cast<double>(dims.back()), static_cast<double>(c.out_channels), 3);
}

QwenImage21VaeDecoder::QwenImage21VaeDecoder(Backend& backend, const Vae21Config& config, WeightBinder& binder)
    : be_(backend), ops_(backend), config_(config) {
  bind(binder, &be_, config_, w_);
  const int64_t C = config_.z_dim;
  DITBATCH_CHECK(std::ssize(config_.latents_std) == C && std::ssize(config_.latents_mean) == C,
                 "vae 2.1: latents_mean/latents_std must have z_dim = {} values", C);
  latents_std_ = be_.upload(Tensor::host_f32({C}, config_.latents_std), DType::F32);
  latents_mean_ = be_.upload(Tensor::host_f32({C}, config_.latents_mean), DType::F32);
}

std::vector<WeightSpec> QwenImage21VaeDecoder::weight_specs(const Vae21Config& config) {
  SpecRecorder recorder;
  Weights unused;
  bind(recorder, nullptr, config, unused);
  return recorder.specs;
}

Tensor QwenImage21VaeDecoder::denormalized_latents(const Tensor& packed, int64_t h, int64_t w) {
  const int64_t C = config_.z_dim;
  DITBATCH_CHECK(packed.rank() == 2 && packed.dim(0) == h * w && packed.dim(1) == C && packed.dtype() == DType::F32,
                 "vae 2.1 decode: latents {} (expected f32 [{} * {}, {}])", packed.describe(), h, w, C);
  // z * std + mean: the product as the gated add of a zero tensor (0 + std * z is exactly the
  // rounded product), then the mean added, two rounded f32 ops as diffusers does them.
  Tensor z = be_.upload(Tensor::host_f32({h * w, C}, std::vector<float>(static_cast<size_t>(h * w * C), 0.0f)),
                        DType::F32);
  be_.gated_add_(z, latents_std_, packed);
  be_.add_(z, latents_mean_);
  z = z.view({h, w, C});
  return z.dtype() == be_.act_dtype() ? z : be_.cast(z, be_.act_dtype());
}

Tensor QwenImage21VaeDecoder::dup_up(const Tensor& x, int64_t out_channels, int64_t frames) {
  const int64_t h = x.dim(0), w = x.dim(1), in = x.dim(2), cout = out_channels;
  const int64_t r = cout * 4 * frames / in, groups = in / cout;  // in channel of (o, j): groups * o + j
  DITBATCH_CHECK(r > 0 && in % cout == 0 && (4 * frames) % r == 0, "vae 2.1: DupUp3D {} -> {} channels, factor_t {}",
                 in, cout, frames);
  if (groups == 1) return be_.upsample_nearest2x(x);  // every (dy, dx) reads channel o
  // Channel group j of every pixel as its own rows: [groups, h * w, cout].
  const Tensor by_group = be_.permute(x.view({h * w, cout, groups}), {2, 0, 1});
  // out[dy, dx] = group ((ft - 1) 4 + 2 dy + dx) / r, then interleaved into [h, dy, w, dx, cout].
  Tensor parts = be_.empty({4, h * w * cout}, x.dtype());
  for (int64_t dy = 0; dy < 2; ++dy)
    for (int64_t dx = 0; dx < 2; ++dx) {
      const int64_t j = ((frames - 1) * 4 + 2 * dy + dx) / r;
      be_.copy_(parts.slice0(2 * dy + dx, 2 * dy + dx + 1), by_group.slice0(j, j + 1).view({1, h * w * cout}));
    }
  return be_.permute(parts.view({2, 2, h, w, cout}), {2, 0, 3, 1, 4}).view({2 * h, 2 * w, cout});
}

Tensor QwenImage21VaeDecoder::up_block(const UpBlock& up, const Tensor& x) {
  Tensor y = x;
  for (const VaeResBlock& r : up.resnets) y = ops_.residual(r, y);
  if (!up.has_upsampler) return y;
  y = ops_.conv3x3(up.upsample_conv, be_.upsample_nearest2x(y));
  be_.add_(y, dup_up(x, y.dim(2), up.shortcut_frames));
  return y;
}

Tensor QwenImage21VaeDecoder::decode(const Tensor& z, const StageHook& hook) {
  DITBATCH_CHECK(z.rank() == 3 && z.dim(2) == config_.z_dim && z.device() == be_.device(),
                 "vae 2.1 decode: z {} (expected [h, w, {}] on the backend)", z.describe(), config_.z_dim);
  Tensor x = ops_.front(w_.trunk, z);
  if (hook) hook("mid", x);
  for (size_t i = 0; i < w_.up_blocks.size(); ++i) {
    x = up_block(w_.up_blocks[i], x);
    if (hook) hook(fmt::format("up_{}", i), x);
  }
  return ops_.head(w_.trunk, x);  // [16h, 16w, out_channels]
}

}  // namespace ditbatch
