// True classifier-free guidance as QwenImagePipeline.__call__ combines its two passes, from the
// Backend's generic ops.
#pragma once

#include "core/backend.h"

namespace ditbatch {

// Per row (token) r: comb = neg + scale * (cond - neg), rescaled to the norm of the
// conditioned prediction, comb_r * ||cond_r|| / ||comb_r||. cond, neg: f32 [S, C] -> f32 [S, C].
Tensor true_cfg_combine(Backend& be, const Tensor& cond, const Tensor& neg, float scale);

}  // namespace ditbatch
