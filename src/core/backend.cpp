// The ops that allocate their result for the caller, and the fused ops' default
// implementations: the plain ops in sequence. The CPU backend uses these, so they are also what
// every faster implementation is tested against.
#include "core/backend.h"

#include "core/op_shapes.h"

namespace ditbatch {

Tensor Backend::linear(const Tensor& x, const Tensor& w, const Tensor* bias, DType out_dtype) {
  Tensor y = empty(op_shapes::linear_result(x, op_shapes::linear("linear", x, w, bias)), out_dtype);
  linear(x, w, bias, y);
  return y;
}

Tensor Backend::attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal) {
  op_shapes::attention(q, k, v, causal);
  Tensor o = empty(q.shape(), q.dtype());  // [Lq, H, Dh]
  attention(q, k, v, scale, causal, o);
  return o;
}

Tensor Backend::linear_gelu(const Tensor& x, const Tensor& w, const Tensor& bias) {
  op_shapes::linear("linear_gelu", x, w, &bias);
  return gelu_tanh(linear(x, w, &bias));
}

void Backend::rms_norm_rope(const Tensor& proj, const Tensor& weight, const Tensor& cos, const Tensor& sin,
                            float eps, const Tensor& out) {
  const int64_t H = op_shapes::rms_norm_rope(proj, weight, cos, sin, out);
  const int64_t tokens = proj.rows(), Dh = weight.numel();
  Tensor normed = rms_norm(proj.view({tokens * H, Dh}), weight, eps).view({tokens, H, Dh});  // [tokens, H, Dh]
  rope_interleaved_(normed, cos, sin);
  copy_(out, normed.view({tokens, H * Dh}));
}

Tensor Backend::gated_add_layer_norm_modulate_(Tensor& x, const Tensor& gate, const Tensor& y, const Tensor& shift,
                                               const Tensor& scale, float eps) {
  // Checked before x changes, under this op's name.
  const char* op = "gated_add_layer_norm_modulate_";
  op_shapes::same_shape(op, x, y);
  op_shapes::row_vector(op, x, gate, "gate");
  op_shapes::row_vector(op, x, shift, "shift");
  op_shapes::row_vector(op, x, scale, "scale");
  gated_add_(x, gate, y);
  return layer_norm_modulate(x, shift, scale, eps);
}

}  // namespace ditbatch
