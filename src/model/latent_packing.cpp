#include "model/latent_packing.h"

#include "core/error.h"

namespace ditbatch {

Tensor pack_latents(Backend& be, const Tensor& x) {
  DITBATCH_CHECK(x.rank() == 3 && x.dim(0) > 0 && x.dim(1) > 0 && x.dim(2) > 0 && x.dim(1) % 2 == 0 &&
                     x.dim(2) % 2 == 0,
                 "pack_latents: x {} (expected [C, 2h, 2w]: even, positive height and width)", x.describe());
  const int64_t C = x.dim(0), h = x.dim(1) / 2, w = x.dim(2) / 2;
  // (C, h, dy, w, dx) -> (h, w, C, dy, dx), as diffusers' view + permute(0, 2, 4, 1, 3, 5)
  return be.permute(x.view({C, h, 2, w, 2}), {1, 3, 0, 2, 4}).view({h * w, 4 * C});  // [S, 4C]
}

Tensor unpack_latents_nhwc(Backend& be, const Tensor& packed, int64_t h, int64_t w) {
  DITBATCH_CHECK(h > 0 && w > 0 && packed.rank() == 2 && packed.dim(0) == h * w && packed.dim(1) > 0 &&
                     packed.dim(1) % 4 == 0,
                 "unpack_latents: packed {} for a {}x{} grid (expected [h * w, 4C])", packed.describe(), h, w);
  const int64_t C = packed.dim(1) / 4;
  // (h, w, C, dy, dx) -> (h, dy, w, dx, C): the rows of the image, then its channels last
  return be.permute(packed.view({h, w, C, 2, 2}), {0, 3, 1, 4, 2}).view({2 * h, 2 * w, C});  // [2h, 2w, C]
}

}  // namespace ditbatch
