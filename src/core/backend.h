// The Backend: every operation the models need, behind one interface. Model code is written
// once against it. The CPU backend (fp32) runs everything here and is what the CUDA backend, the
// fast path, is compared with; both are held to the float64 loops of the op cases.
//
// Conventions (all backends):
// - Tensors are dense row-major. "Rows" means all leading dims flattened, the last dim is the
//   feature dim. Linear weights are stored [out, in] as in torch (y = x W^T + b).
// - Activations use act_dtype(); residual streams ask for F32 explicitly. Weights use
//   weight_dtype(), which upload_weight() converts to (F32 on the CPU, BF16 on a GPU).
// - Ops ending in '_' update their first argument in place; the others return new tensors.
// - Where a result belongs in part of a larger tensor (each sample of a CFG batch in one joint
//   Q), an op takes `out`: a tensor of exactly the result's shape, usually a view of a range of
//   rows of the larger one (Tensor::slice0). One mechanism for every such op: the view. `out` is
//   a handle, so it is passed const; its elements are written.
// - Every op checks its shapes and fails with the op name and the shapes it got.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ditbatch {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;        // "cpu", "cuda:0"
  virtual Device device() const = 0;
  virtual DType act_dtype() const = 0;          // activations between ops
  virtual DType weight_dtype() const = 0;       // what upload_weight() stores weights in

  // ---- memory ----
  virtual Tensor empty(const Shape& shape, DType dtype) = 0;
  // Copies a host tensor (any float dtype) to the backend, converting to dtype.
  virtual Tensor upload(const Tensor& host, DType dtype) = 0;
  // Weights: converted to the backend's weight dtype, kept for the life of the model. A host
  // backend may keep the host tensor's own buffer where no conversion is needed (no copy of a
  // model-sized load): the caller must not change `host` afterwards.
  virtual Tensor upload_weight(const Tensor& host) = 0;
  // Copies a backend tensor to a new host tensor of its dtype (waits for pending work).
  virtual Tensor to_host(const Tensor& t) = 0;
  // Copies a backend tensor to a new host fp32 tensor (waits for pending work).
  Tensor to_host_f32(const Tensor& t) {
    Tensor host = to_host(t);
    return host.dtype() == DType::F32 ? host : host.to_f32();
  }
  // dst = src (one shape, any float dtypes: converts).
  virtual void copy_(const Tensor& dst, const Tensor& src) = 0;
  // Waits until all queued work is done (no-op on the CPU).
  virtual void synchronize() = 0;
  // Free and total bytes of the backend's device; none where memory is the host's (CPU).
  struct MemoryInfo {
    size_t free_bytes = 0, total_bytes = 0;
  };
  virtual std::optional<MemoryInfo> device_memory() { return std::nullopt; }

  // ---- dense linear algebra ----
  // y[M, N] = x[M, K] w[N, K]^T (+ bias[N]) into out [.., N] (x's leading dims), in out's dtype.
  virtual void linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) = 0;
  // The same into a new tensor; out_dtype F32 keeps a residual-bound result exact.
  Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias, DType out_dtype);
  Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias = nullptr) {
    return linear(x, w, bias, act_dtype());
  }
  // 3x3 convolution, stride 1, zero padding 1, one image in NHWC:
  // x [H, W, Cin], w [Cout, 3*3*Cin] in (ky, kx, cin) order, bias [Cout] -> [H, W, Cout].
  virtual Tensor conv2d_3x3(const Tensor& x, const Tensor& w, const Tensor& bias) = 0;
  // 3x3 convolution, stride 2, over x zero-padded by one row at the bottom and one column at the
  // right only (torch's ZeroPad2d((0, 1, 0, 1)) then Conv2d(stride=2, padding=0)), one image in
  // NHWC: x [H, W, Cin] with H, W >= 2, w and bias as conv2d_3x3 -> [H / 2, W / 2, Cout] (floor:
  // (H + 1 - 3) / 2 + 1). Output (oy, ox) reads input rows 2oy..2oy+2 and columns 2ox..2ox+2.
  virtual Tensor conv2d_3x3_stride2(const Tensor& x, const Tensor& w, const Tensor& bias) = 0;
  // Scaled dot-product attention for one sequence:
  // q [Lq, H, Dh], k and v [Lk, Hkv, Dh] with H % Hkv == 0 (GQA: head h reads kv head
  // h / (H / Hkv)); causal masks key j > query i (requires Lq == Lk). -> out [Lq, H, Dh].
  // spare_rows: each of q, k, v and out has that many more rows in its buffer right after the
  // view. The backend may read q, k and v there, as padding it masks off: finite values (a
  // masked key's V row is still multiplied by 0), never written. It may overwrite out there:
  // the caller holds nothing it still needs in those rows. CUDA pads the lengths up to a few
  // buckets, so that a job of many prompt lengths builds a few cuDNN plans, not one per length.
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal,
                         const Tensor& out, int64_t spare_rows) = 0;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal, const Tensor& out) {
    attention(q, k, v, scale, causal, out, 0);
  }
  // How many spare rows attention() can put to use (0: it always takes the exact lengths).
  virtual int64_t attention_spare_rows() const { return 0; }
  // The same into a new tensor of q's dtype.
  Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal);

  // ---- normalisation (over the last dim, per row) ----
  // RMSNorm: y = (x * 1/sqrt(mean(x^2) + eps)) * weight.
  virtual Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) = 0;
  // LayerNorm without affine, then modulation: y = LN(x) * (1 + scale) + shift.
  // shift, scale: [cols] (one vector for every row).
  virtual Tensor layer_norm_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale,
                                     float eps) = 0;
  // torch's F.normalize times a gain: y = x / max(||x||_2, 1e-12) * scale * gamma; gamma [cols].
  virtual Tensor l2_normalize(const Tensor& x, const Tensor& gamma, float scale) = 0;

  // ---- element-wise ----
  virtual Tensor silu(const Tensor& x) = 0;
  virtual Tensor gelu_tanh(const Tensor& x) = 0;
  // torch's exact GELU: 0.5 x (1 + erf(x / sqrt(2))) (the vision merger's nn.GELU()).
  virtual Tensor gelu_erf(const Tensor& x) = 0;
  // silu(gate) * up (the SwiGLU of the text encoder's MLP).
  virtual Tensor silu_mul(const Tensor& gate, const Tensor& up) = 0;
  // x += y: y of x's shape, or a row vector [cols] added to every row.
  virtual void add_(Tensor& x, const Tensor& y) = 0;
  // x += gate * y, gate [cols] broadcast over rows (the gated residual).
  virtual void gated_add_(Tensor& x, const Tensor& gate, const Tensor& y) = 0;
  virtual void clamp_(Tensor& x, float lo, float hi) = 0;
  // x += alpha * y (same shape; x f32).
  virtual void axpy_(Tensor& x, float alpha, const Tensor& y) = 0;
  // x /= y (both f32): y of x's shape, or a row vector [cols] dividing every row.
  virtual void div_(Tensor& x, const Tensor& y) = 0;
  // x[r, :] *= s[r]: x f32 [rows, cols], s f32 [rows].
  virtual void scale_rows_(Tensor& x, const Tensor& s) = 0;
  // x = x * scale + shift, two rounded f32 ops (x f32).
  virtual void scale_shift_(Tensor& x, float scale, float shift) = 0;
  // f32 -> u8 of the same shape: rounded half to even (as numpy's round), saturated to [0, 255];
  // NaN gives 0.
  virtual Tensor to_u8(const Tensor& x) = 0;

  // ---- reductions ----
  // The L2 norm of each row, summed in double: x [rows, cols] (f32) -> f32 [rows].
  virtual Tensor row_norms(const Tensor& x) = 0;
  // ---- positions ----
  // Interleaved-pair RoPE (complex multiply of (x[2m], x[2m+1]) by cos + i sin), in place.
  // x [L, H, Dh]; cos, sin [L, Dh/2] (fp32).
  virtual void rope_interleaved_(Tensor& x, const Tensor& cos, const Tensor& sin) = 0;
  // NeoX RoPE: pairs (j, j + Dh/2). x [L, H, Dh]; cos, sin [L, Dh/2] (fp32).
  virtual void rope_neox_(Tensor& x, const Tensor& cos, const Tensor& sin) = 0;

  // ---- gathers and resampling ----
  // out[i] = table[ids[i]]; ids i64 [L] on the host. -> [L, D] in f32 (a residual stream).
  virtual Tensor embedding(const Tensor& table, const Tensor& ids) = 0;
  // Nearest-neighbour x2 upsampling of one NHWC image: [H, W, C] -> [2H, 2W, C].
  virtual Tensor upsample_nearest2x(const Tensor& x) = 0;

  // ---- layout ----
  // torch's x.permute(dims).contiguous(): out.dim(k) = x.dim(dims[k]); rank 1 to 6, elements
  // of 1, 2 or 4 bytes (the float dtypes, u8).
  virtual Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) = 0;
  // x in another dtype (float dtypes; a new tensor even where the dtype is x's).
  Tensor cast(const Tensor& x, DType dtype) {
    Tensor y = empty(x.shape(), dtype);
    copy_(y, x);
    return y;
  }

  // ---- checks ----
  // How many elements of x are NaN or +-Inf (waits for queued work): checked before an image is kept.
  virtual int64_t count_nonfinite(const Tensor& x) = 0;

  // ---- fused ops ----
  // Each has a default here, written with the ops above: a backend overrides one only to do
  // the same work in fewer passes over memory. The defaults are the reference for the tests.

  // gelu_tanh(x w^T + bias) (the MLP's up projection; cuBLASLt's GELU_BIAS epilogue).
  virtual Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& bias);
  // Per-head RMSNorm (gain weight [Dh]) then interleaved RoPE (cos, sin [tokens, Dh/2]) of
  // proj [tokens, H * Dh], into out [tokens, H * Dh]: the rows of the joint Q and K.
  virtual void rms_norm_rope(const Tensor& proj, const Tensor& weight, const Tensor& cos, const Tensor& sin,
                             float eps, const Tensor& out);
  // x += gate * y, then returns layer_norm_modulate(x, shift, scale, eps): the residual add
  // and the next LayerNorm in one pass over the residual stream.
  virtual Tensor gated_add_layer_norm_modulate_(Tensor& x, const Tensor& gate, const Tensor& y, const Tensor& shift,
                                                const Tensor& scale, float eps);
};

}  // namespace ditbatch
