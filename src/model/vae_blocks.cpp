#include "model/vae_blocks.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace ditbatch {
namespace {

// A conv weight as the NHWC im2col GEMM reads it: [out, (ky, kx, in)]. A causal 3-D weight
// [out, in, kt, kh, kw] meets real data only through its last temporal slice when one frame is
// decoded (the cache is empty, the front padding zeros): that slice is kept. Elements move in
// their stored dtype (a bf16 file stays bf16 until the backend converts it).
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

void read_vae_latent_stats(const Config& comp, int64_t z_dim, std::vector<float>& mean, std::vector<float>& std) {
  for (double v : comp.get_doubles("latents_mean")) mean.push_back(static_cast<float>(v));
  for (double v : comp.get_doubles("latents_std")) std.push_back(static_cast<float>(v));
  if (std::ssize(mean) != z_dim || std::ssize(std) != z_dim)
    fail_input("{}: latents_mean/latents_std must have z_dim = {} values", comp.where(), z_dim);
  for (float s : std)
    if (!(s > 0.0f)) fail_input("{}: latents_std values must be positive", comp.where());
}

void check_vae_levels(const Config& comp, const std::vector<int64_t>& dim_mult,
                      const std::vector<int64_t>& temperal_downsample, int64_t base, const char* base_key) {
  // At most 8 levels (Qwen-Image has 4, 2.1 5): the spatial scale 2^(levels - 1) stays a small shift.
  if (dim_mult.size() < 2 || dim_mult.size() > 8 || temperal_downsample.size() != dim_mult.size() - 1)
    fail_input("{}: dim_mult {} and temperal_downsample {} do not fit together (need len(dim_mult) - 1 flags)",
               comp.where(), shape_str(dim_mult), shape_str(temperal_downsample));
  for (int64_t m : dim_mult)
    if (m < 1 || m > kMaxConfigWidth / base)
      fail_input("{}: dim_mult {} x {} {} must give widths 1..{}", comp.where(), shape_str(dim_mult), base_key, base,
                 kMaxConfigWidth);
}

VaeConv VaeBinder::conv(const std::string& name, int64_t out, int64_t in, int64_t k, bool causal3d) const {
  const Shape shape = causal3d ? Shape{out, in, k, k, k} : Shape{out, in, k, k};
  VaeConv cv;
  cv.weight = upload_bound(be, conv_weight_to_gemm(binder.bind(name + ".weight", shape, WeightInit::Matrix, why)));
  cv.bias = upload_bound(be, binder.bind(name + ".bias", {out}, WeightInit::Bias, why));
  return cv;
}

Tensor VaeBinder::gamma(const std::string& name, int64_t ch, const Shape& tail) const {
  Shape shape = {ch};
  shape.insert(shape.end(), tail.begin(), tail.end());
  Tensor g = binder.bind(name, shape, WeightInit::Gain, why);
  return upload_bound(be, g.defined() ? g.view({ch}) : g);
}

VaeResBlock VaeBinder::residual(const std::string& p, int64_t in, int64_t out, bool causal3d) const {
  VaeResBlock r;
  r.norm1 = gamma(p + "norm1.gamma", in, {1, 1, 1});
  r.conv1 = conv(p + "conv1", out, in, 3, causal3d);
  r.norm2 = gamma(p + "norm2.gamma", out, {1, 1, 1});
  r.conv2 = conv(p + "conv2", out, out, 3, causal3d);
  r.has_shortcut = in != out;
  if (r.has_shortcut) r.shortcut = conv(p + "conv_shortcut", out, in, 1, causal3d);
  return r;
}

VaeAttention VaeBinder::attention(const std::string& p, int64_t ch) const {
  VaeAttention a;
  a.norm = gamma(p + "norm.gamma", ch, {1, 1});
  // to_qkv's output channels are q | k | v: split once here into three 1x1 convs.
  const VaeConv qkv = conv(p + "to_qkv", 3 * ch, ch, 1, false);
  for (int part = 0; part < 3; ++part) {
    VaeConv& third = part == 0 ? a.q : part == 1 ? a.k : a.v;
    if (qkv.weight.defined()) {
      third.weight = qkv.weight.slice0(part * ch, (part + 1) * ch);
      third.bias = qkv.bias.slice0(part * ch, (part + 1) * ch);
    }
  }
  a.proj = conv(p + "proj", ch, ch, 1, false);
  return a;
}

void VaeBinder::trunk_front(VaeTrunk& t, int64_t z_dim, int64_t width, bool causal3d) const {
  t.post_quant_conv = conv("post_quant_conv", z_dim, z_dim, 1, causal3d);
  t.conv_in = conv("decoder.conv_in", width, z_dim, 3, causal3d);
  t.mid0 = residual("decoder.mid_block.resnets.0.", width, width, causal3d);
  t.attention = attention("decoder.mid_block.attentions.0.", width);
  t.mid1 = residual("decoder.mid_block.resnets.1.", width, width, causal3d);
}

void VaeBinder::trunk_head(VaeTrunk& t, int64_t width, int64_t out_channels, bool causal3d) const {
  t.norm_out = gamma("decoder.norm_out.gamma", width, {1, 1, 1});
  t.conv_out = conv("decoder.conv_out", out_channels, width, 3, causal3d);
}

Tensor VaeOps::front(const VaeTrunk& t, const Tensor& z) const {
  Tensor x = conv3x3(t.conv_in, conv1x1(t.post_quant_conv, z));
  return residual(t.mid1, attention(t.attention, residual(t.mid0, x)));
}

Tensor VaeOps::head(const VaeTrunk& t, const Tensor& x) const {
  Tensor y = conv3x3(t.conv_out, be_.silu(rms_norm(x, t.norm_out)));
  be_.clamp_(y, -1.0f, 1.0f);
  return y;
}

Tensor VaeOps::conv3x3(const VaeConv& conv, const Tensor& x) const { return be_.conv2d_3x3(x, conv.weight, conv.bias); }

Tensor VaeOps::conv1x1(const VaeConv& conv, const Tensor& x) const { return be_.linear(x, conv.weight, &conv.bias); }

Tensor VaeOps::rms_norm(const Tensor& x, const Tensor& gamma) const {
  return be_.l2_normalize(x, gamma, static_cast<float>(std::sqrt(static_cast<double>(x.cols()))));
}

Tensor VaeOps::residual(const VaeResBlock& blk, const Tensor& x) const {
  Tensor shortcut = blk.has_shortcut ? conv1x1(blk.shortcut, x) : x;
  Tensor h = conv3x3(blk.conv1, be_.silu(rms_norm(x, blk.norm1)));
  h = conv3x3(blk.conv2, be_.silu(rms_norm(h, blk.norm2)));
  be_.add_(h, shortcut);
  return h;
}

Tensor VaeOps::attention(const VaeAttention& blk, const Tensor& x) const {
  const int64_t H = x.dim(0), W = x.dim(1), C = x.dim(2);
  Tensor normed = rms_norm(x, blk.norm).view({H * W, C});
  Tensor q = conv1x1(blk.q, normed), k = conv1x1(blk.k, normed), v = conv1x1(blk.v, normed);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(C)));
  Tensor o = be_.attention(q.view({H * W, 1, C}), k.view({H * W, 1, C}), v.view({H * W, 1, C}), scale, false);
  Tensor out = conv1x1(blk.proj, o.view({H, W, C}));
  be_.add_(out, x);
  return out;
}

}  // namespace ditbatch
