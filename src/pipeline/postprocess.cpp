#include "pipeline/postprocess.h"

namespace ditbatch {

Tensor postprocess_to_u8(Backend& be, const Tensor& decoded) {
  // f32 first: in bf16 mode each step below would otherwise round to bf16.
  Tensor x = be.cast(decoded, DType::F32);
  be.scale_shift_(x, 0.5f, 0.5f);  // x / 2 + 0.5: halving is exact, as torch's division by 2
  be.clamp_(x, 0.0f, 1.0f);
  be.scale_shift_(x, 255.0f, 0.0f);
  return be.to_u8(x);
}

bool keep_final_latents(Backend& be, const Tensor& latents, int64_t steps, GeneratedImage& image) {
  const int64_t bad = be.count_nonfinite(latents);
  image.latents = be.to_host_f32(latents);
  if (bad == 0) return true;
  image.error = fmt::format("NaN or Inf in {} of {} latent values after {} steps (a bad weight or an overflow)", bad,
                            latents.numel(), steps);
  return false;
}

bool keep_decoded_image(Backend& be, const Tensor& decoded, GeneratedImage& image) {
  const int64_t bad = be.count_nonfinite(decoded);
  if (bad > 0) {
    image.error = fmt::format("NaN or Inf in {} of {} values of the decoded image (VAE)", bad, decoded.numel());
    return false;
  }
  const Tensor pixels = be.to_host(postprocess_to_u8(be, decoded));  // [H, W, channels]
  image.channels = static_cast<int>(pixels.dim(-1));
  image.pixels.assign(pixels.data<uint8_t>(), pixels.data<uint8_t>() + pixels.numel());
  image.ok = true;
  return true;
}

}  // namespace ditbatch
