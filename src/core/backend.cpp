// The fused ops' default implementations: the plain ops in sequence. The CPU backend uses
// these, so they are also what every faster implementation is tested against.
#include "core/backend.h"

#include "core/op_shapes.h"

namespace ditbatch {

Tensor Backend::linear_gelu(const Tensor& x, const Tensor& w, const Tensor& bias) {
  op_shapes::linear("linear_gelu", x, w, &bias);
  return gelu_tanh(linear(x, w, &bias));
}

void Backend::linear_into_(Tensor& dst, int64_t row, const Tensor& x, const Tensor& w, const Tensor& bias) {
  op_shapes::linear_into("linear_into_", dst, row, x, w, bias);
  copy_rows_(dst, row, linear(x, w, &bias, dst.dtype()));
}

void Backend::rms_norm_rope_into_(Tensor& dst, int64_t row, const Tensor& proj, const Tensor& weight,
                                  const Tensor& cos, const Tensor& sin, float eps) {
  const int64_t H = op_shapes::rms_norm_rope_into(dst, row, proj, weight, cos, sin);
  const int64_t tokens = proj.rows(), Dh = weight.numel();
  Tensor normed = rms_norm(proj.view({tokens * H, Dh}), weight, eps).view({tokens, H, Dh});  // [tokens, H, Dh]
  rope_interleaved_(normed, cos, sin);
  copy_rows_(dst, row, normed.view({tokens, H * Dh}));
}

void Backend::attention_into_(Tensor& dst, int64_t row, const Tensor& q, const Tensor& k, const Tensor& v,
                              float scale, bool causal) {
  op_shapes::attention_into(dst, row, q, k, v, causal);
  const int64_t Lq = q.dim(0);
  copy_rows_(dst, row, attention(q, k, v, scale, causal).view({Lq, q.dim(1) * q.dim(2)}));
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
