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
  for (double v : comp.get_doubles("latents_mean")) c.latents_mean.push_back(static_cast<float>(v));
  for (double v : comp.get_doubles("latents_std")) c.latents_std.push_back(static_cast<float>(v));
  if (comp.has("attn_scales") && !comp.get_ints("attn_scales").empty())
    fail_input("{}: attn_scales must be empty (Qwen-Image's VAE has attention only in the mid block)", comp.where());
  // At most 8 levels (Qwen-Image has 4): the spatial scale 2^(levels - 1) stays a small shift.
  if (c.dim_mult.size() < 2 || c.dim_mult.size() > 8 || c.temperal_downsample.size() != c.dim_mult.size() - 1)
    fail_input("{}: dim_mult {} and temperal_downsample {} do not fit together (need len(dim_mult) - 1 flags)",
               comp.where(), shape_str(c.dim_mult), shape_str(c.temperal_downsample));
  if (static_cast<int64_t>(c.latents_mean.size()) != c.z_dim || static_cast<int64_t>(c.latents_std.size()) != c.z_dim)
    fail_input("{}: latents_mean/latents_std must have z_dim = {} values", comp.where(), c.z_dim);
  for (int64_t m : c.dim_mult)
    if (m < 1 || m > kMaxConfigWidth / c.base_dim)
      fail_input("{}: dim_mult {} x base_dim {} must give widths 1..{}", comp.where(), shape_str(c.dim_mult),
                 c.base_dim, kMaxConfigWidth);
  for (float s : c.latents_std)
    if (!(s > 0.0f)) fail_input("{}: latents_std values must be positive", comp.where());
  return c;
}

std::vector<int64_t> VaeConfig::decoder_dims() const {
  std::vector<int64_t> dims = {base_dim * dim_mult.back()};
  for (auto it = dim_mult.rbegin(); it != dim_mult.rend(); ++it) dims.push_back(base_dim * *it);
  return dims;
}

namespace {

// Causal 3-D conv weights [out, in, kt, kh, kw] meet real data only through the last temporal
// slice when decoding one frame (the cache is empty, the front padding is zeros): keep that
// slice and lay it out as [out, (ky, kx, in)] for the NHWC im2col GEMM. Elements move in their
// stored dtype (a bf16 file stays bf16 until the backend converts it).
Tensor conv_weight_to_gemm(const Tensor& w) {
  if (!w.defined()) return w;
  const bool is3d = w.rank() == 5;
  const int64_t out = w.dim(0), in = w.dim(1), kt = is3d ? w.dim(2) : 1, kh = w.dim(-2), kw = w.dim(-1);
  Tensor g = Tensor::host({out, kh * kw * in}, w.dtype());
  const size_t size = dtype_size(w.dtype());
  const auto* src = static_cast<const char*>(w.raw());
  auto* dst = static_cast<char*>(g.raw());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      for (int64_t y = 0; y < kh; ++y)
        for (int64_t x = 0; x < kw; ++x)
          std::memcpy(dst + static_cast<size_t>(o * kh * kw * in + (y * kw + x) * in + i) * size,
                      src + static_cast<size_t>((((o * in + i) * kt + (kt - 1)) * kh + y) * kw + x) * size, size);
  return g;
}

}  // namespace

void VaeDecoder::bind(WeightBinder& b, Backend* be, const VaeConfig& c, Weights& w) {
  const auto dims = c.decoder_dims();
  const std::string why = fmt::format("base_dim {}, dim_mult {}, z_dim {}", c.base_dim, shape_str(c.dim_mult), c.z_dim);
  auto conv = [&](const std::string& name, int64_t out, int64_t in, int64_t k, bool causal3d) {
    Shape shape = causal3d ? Shape{out, in, k, k, k} : Shape{out, in, k, k};
    Conv cv;
    cv.weight = upload_bound(be, conv_weight_to_gemm(b.bind(name + ".weight", shape, WeightInit::Matrix, why)));
    cv.bias = upload_bound(be, b.bind(name + ".bias", {out}, WeightInit::Bias, why));
    return cv;
  };
  auto gamma = [&](const std::string& name, int64_t ch, const Shape& tail) {
    Shape shape = {ch};
    shape.insert(shape.end(), tail.begin(), tail.end());
    Tensor g = b.bind(name, shape, WeightInit::Gain, why);
    return upload_bound(be, g.defined() ? g.view({ch}) : g);
  };
  auto res = [&](const std::string& p, int64_t in, int64_t out) {
    ResBlock r;
    r.norm1 = gamma(p + "norm1.gamma", in, {1, 1, 1});
    r.conv1 = conv(p + "conv1", out, in, 3, true);
    r.norm2 = gamma(p + "norm2.gamma", out, {1, 1, 1});
    r.conv2 = conv(p + "conv2", out, out, 3, true);
    r.has_shortcut = in != out;
    if (r.has_shortcut) r.shortcut = conv(p + "conv_shortcut", out, in, 1, true);
    return r;
  };
  w.post_quant_conv = conv("post_quant_conv", c.z_dim, c.z_dim, 1, true);
  w.conv_in = conv("decoder.conv_in", dims[0], c.z_dim, 3, true);
  w.mid0 = res("decoder.mid_block.resnets.0.", dims[0], dims[0]);
  w.attn_norm = gamma("decoder.mid_block.attentions.0.norm.gamma", dims[0], {1, 1});
  // to_qkv's output channels are q | k | v: split once here into three 1x1 convs.
  Conv qkv = conv("decoder.mid_block.attentions.0.to_qkv", 3 * dims[0], dims[0], 1, false);
  for (int p = 0; p < 3; ++p) {
    Conv& part = p == 0 ? w.attn_q : p == 1 ? w.attn_k : w.attn_v;
    if (qkv.weight.defined()) {
      part.weight = qkv.weight.slice0(p * dims[0], (p + 1) * dims[0]);
      part.bias = qkv.bias.slice0(p * dims[0], (p + 1) * dims[0]);
    }
  }
  w.attn_proj = conv("decoder.mid_block.attentions.0.proj", dims[0], dims[0], 1, false);
  w.mid1 = res("decoder.mid_block.resnets.1.", dims[0], dims[0]);
  const size_t n_up = c.dim_mult.size();
  for (size_t i = 0; i < n_up; ++i) {
    // An up block after an upsampler starts from half its predecessor's width (diffusers' in_dim // 2).
    const int64_t in = i == 0 ? dims[i] : dims[i] / 2, out = dims[i + 1];
    UpBlock up;
    int64_t current = in;
    for (int64_t r = 0; r <= c.num_res_blocks; ++r) {
      up.resnets.push_back(res(fmt::format("decoder.up_blocks.{}.resnets.{}.", i, r), current, out));
      current = out;
    }
    up.has_upsampler = i + 1 != n_up;
    if (up.has_upsampler) {
      const std::string p = fmt::format("decoder.up_blocks.{}.upsamplers.0.", i);
      up.upsample_conv = conv(p + "resample.1", out / 2, out, 3, false);
      // upsample3d's time_conv doubles frames: a single image never reaches it (make-tiny writes it).
      if (c.temperal_downsample[n_up - 2 - i] && b.recording()) {
        b.bind(p + "time_conv.weight", {2 * out, out, 3, 1, 1}, WeightInit::Matrix, why);
        b.bind(p + "time_conv.bias", {2 * out}, WeightInit::Bias, why);
      }
    }
    w.up_blocks.push_back(std::move(up));
  }
  w.norm_out = gamma("decoder.norm_out.gamma", dims.back(), {1, 1, 1});
  w.conv_out = conv("decoder.conv_out", 3, dims.back(), 3, true);
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

VaeDecoder::VaeDecoder(Backend& backend, const VaeConfig& config, WeightBinder& binder) : be_(backend), config_(config) {
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

Tensor VaeDecoder::conv3x3(const Conv& conv, const Tensor& x) { return be_.conv2d_3x3(x, conv.weight, conv.bias); }

Tensor VaeDecoder::conv1x1(const Conv& conv, const Tensor& x) { return be_.linear(x, conv.weight, &conv.bias); }

// The Wan VAE's RMS_norm: F.normalize over the channels, times sqrt(C) (python's C**0.5, as
// f32) and the gain.
Tensor VaeDecoder::rms_norm(const Tensor& x, const Tensor& gamma) {
  return be_.l2_normalize(x, gamma, static_cast<float>(std::sqrt(static_cast<double>(x.cols()))));
}

Tensor VaeDecoder::residual(const ResBlock& blk, const Tensor& x) {
  Tensor shortcut = blk.has_shortcut ? conv1x1(blk.shortcut, x) : x;
  Tensor h = conv3x3(blk.conv1, be_.silu(rms_norm(x, blk.norm1)));
  h = conv3x3(blk.conv2, be_.silu(rms_norm(h, blk.norm2)));
  be_.add_(h, shortcut);
  return h;
}

Tensor VaeDecoder::mid_attention(const Tensor& x) {
  // One head over all pixels: q, k, v are channel thirds of to_qkv, scale 1/sqrt(C).
  const int64_t H = x.dim(0), W = x.dim(1), C = x.dim(2);
  Tensor normed = rms_norm(x, w_.attn_norm).view({H * W, C});
  Tensor q = conv1x1(w_.attn_q, normed), k = conv1x1(w_.attn_k, normed), v = conv1x1(w_.attn_v, normed);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(C)));
  Tensor o = be_.attention(q.view({H * W, 1, C}), k.view({H * W, 1, C}), v.view({H * W, 1, C}), scale, false);
  Tensor out = conv1x1(w_.attn_proj, o.view({H, W, C}));
  be_.add_(out, x);
  return out;
}

Tensor VaeDecoder::up_block(const UpBlock& up, Tensor x) {
  for (const ResBlock& r : up.resnets) x = residual(r, x);
  if (up.has_upsampler) x = conv3x3(up.upsample_conv, be_.upsample_nearest2x(x));
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
  x = conv1x1(w_.post_quant_conv, x);
  x = conv3x3(w_.conv_in, x);
  x = residual(w_.mid0, x);
  x = mid_attention(x);
  x = residual(w_.mid1, x);
  for (const UpBlock& up : w_.up_blocks) x = up_block(up, x);
  x = conv3x3(w_.conv_out, be_.silu(rms_norm(x, w_.norm_out)));
  be_.clamp_(x, -1.0f, 1.0f);
  return x;  // [8h, 8w, 3]
}

}  // namespace ditbatch
