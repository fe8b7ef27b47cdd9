// The fused ops' default implementations: the plain ops in sequence. The CPU backend uses
// these, so they are also what every faster implementation is tested against.
#include "core/backend.h"

#include "core/error.h"

namespace ditbatch {

Tensor Backend::linear_gelu(const Tensor& x, const Tensor& w, const Tensor& bias) {
  return gelu_tanh(linear(x, w, &bias));
}

void Backend::linear_into_(Tensor& dst, int64_t row, const Tensor& x, const Tensor& w, const Tensor& bias) {
  copy_rows_(dst, row, linear(x, w, &bias, dst.dtype()));
}

void Backend::rms_norm_rope_into_(Tensor& dst, int64_t row, const Tensor& proj, const Tensor& weight,
                                  const Tensor& cos, const Tensor& sin, float eps) {
  const int64_t tokens = proj.rows(), Dh = weight.numel();
  DITBATCH_CHECK(proj.rank() == 2 && Dh > 0 && proj.cols() % Dh == 0,
                 "rms_norm_rope_into_: proj {} is not [tokens, H * Dh] for a norm weight {}", proj.describe(),
                 weight.describe());
  const int64_t H = proj.cols() / Dh;
  Tensor normed = rms_norm(proj.view({tokens * H, Dh}), weight, eps).view({tokens, H, Dh});  // [tokens, H, Dh]
  rope_interleaved_(normed, cos, sin);
  copy_rows_(dst, row, normed.view({tokens, H * Dh}));
}

Tensor Backend::gated_add_layer_norm_modulate_(Tensor& x, const Tensor& gate, const Tensor& y, const Tensor& shift,
                                               const Tensor& scale, float eps) {
  gated_add_(x, gate, y);
  return layer_norm_modulate(x, shift, scale, eps);
}

}  // namespace ditbatch
