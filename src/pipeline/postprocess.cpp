#include "pipeline/postprocess.h"

namespace ditbatch {

Tensor postprocess_to_rgb8(Backend& be, const Tensor& decoded) {
  // f32 first: in bf16 mode each step below would otherwise round to bf16.
  Tensor x = be.cast(decoded, DType::F32);
  be.scale_shift_(x, 0.5f, 0.5f);  // x / 2 + 0.5: halving is exact, as torch's division by 2
  be.clamp_(x, 0.0f, 1.0f);
  be.scale_shift_(x, 255.0f, 0.0f);
  return be.to_u8(x);
}

}  // namespace ditbatch
