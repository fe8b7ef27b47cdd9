#include "pipeline/true_cfg.h"

#include "core/error.h"

namespace ditbatch {

Tensor true_cfg_combine(Backend& be, const Tensor& cond, const Tensor& neg, float scale) {
  DITBATCH_CHECK(cond.dtype() == DType::F32 && neg.dtype() == DType::F32 && cond.shape() == neg.shape(),
                 "true CFG: cond {} and neg {} (expected f32 of one shape)", cond.describe(), neg.describe());
  // Three rounded f32 ops as torch makes them: cond - neg, scale * it, neg + that.
  Tensor difference = be.cast(cond, DType::F32);  // [S, C]
  be.axpy_(difference, -1.0f, neg);  // -1 * neg is exact: one rounding, as cond - neg
  Tensor comb = be.cast(neg, DType::F32);  // [S, C]
  be.axpy_(comb, scale, difference);
  Tensor ratio = be.row_norms(cond);  // [S]: cond_norm, then cond_norm / noise_norm
  be.div_(ratio, be.row_norms(comb));
  be.scale_rows_(comb, ratio);
  return comb;
}

}  // namespace ditbatch
