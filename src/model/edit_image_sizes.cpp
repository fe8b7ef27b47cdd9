#include "model/edit_image_sizes.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ditbatch {

namespace {

// Sides and pixel counts below these keep every product exact in float64 (h * w < 2^52), so the
// float64 math here is Python's int / int true division exactly.
constexpr int64_t kMaxSide = int64_t{1} << 26;
constexpr int64_t kMaxPixels = int64_t{1} << 52;

// Python's round(x) of a float: to nearest, ties to even (the default rounding mode).
int64_t python_round(double x) {
  return static_cast<int64_t>(std::nearbyint(x));
}

}  // namespace

ImageSize calculate_dimensions(int64_t target_area, double ratio) {
  if (target_area < 1 || target_area > kMaxPixels)
    fail_input("calculate_dimensions: target area {} must be 1..{}", target_area, kMaxPixels);
  if (!std::isfinite(ratio) || ratio <= 0)
    fail_input("calculate_dimensions: aspect ratio (width / height) {} must be a positive number", ratio);
  const double width = std::sqrt(static_cast<double>(target_area) * ratio);
  const double height = width / ratio;
  if (width / 32 > static_cast<double>(kMaxSide) || height / 32 > static_cast<double>(kMaxSide))
    fail_input("calculate_dimensions: aspect ratio {} at area {} gives a {:.0f}x{:.0f} image, past {} a side", ratio,
               target_area, width, height, kMaxSide * 32);
  return ImageSize{python_round(width / 32) * 32, python_round(height / 32) * 32};
}

ImageSize smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels, int64_t max_pixels) {
  if (height < 1 || width < 1 || height > kMaxSide || width > kMaxSide)
    fail_input("smart_resize: image of {}x{} (height x width): each side must be 1..{}", height, width, kMaxSide);
  if (factor < 1 || factor > kMaxSide) fail_input("smart_resize: factor {} must be 1..{}", factor, kMaxSide);
  if (min_pixels < 0 || min_pixels > kMaxPixels || max_pixels < 1 || max_pixels > kMaxPixels)
    fail_input("smart_resize: min_pixels {} must be 0..{} and max_pixels {} must be 1..{}", min_pixels, kMaxPixels,
               max_pixels, kMaxPixels);
  const double aspect = static_cast<double>(std::max(height, width)) / static_cast<double>(std::min(height, width));
  if (aspect > 200)
    fail_input(
        "smart_resize: image of {}x{} (height x width) has an absolute aspect ratio of {}; it must be at most "
        "200 (the Qwen2-VL image processor's limit)",
        height, width, aspect);
  const double h = static_cast<double>(height), w = static_cast<double>(width), f = static_cast<double>(factor);
  int64_t h_bar = python_round(h / f) * factor;
  int64_t w_bar = python_round(w / f) * factor;
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(static_cast<double>(height * width) / static_cast<double>(max_pixels));
    h_bar = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / static_cast<double>(height * width));
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return ImageSize{w_bar, h_bar};
}

}  // namespace ditbatch
