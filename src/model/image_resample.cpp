#include "model/image_resample.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "core/error.h"

namespace ditbatch {

namespace {

// Taps are integers in units of 2^-22: 8 bits of pixel, 2 bits of headroom for the sums of taps
// that go negative or past 1, in a 32-bit accumulator.
constexpr int kPrecisionBits = 32 - 8 - 2;

struct ResampleFilter {
  const char* name;
  double (*weight)(double x);
  double support;  // the half-width of the kernel, in input pixels, when not downsampling
};

// Cubic convolution with a = -0.5, in Pillow's evaluation order.
double bicubic_weight(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * std::numbers::pi;
  return std::sin(x) / x;
}

double lanczos_weight(double x) {
  if (-3.0 <= x && x < 3.0) return sinc(x) * sinc(x / 3);
  return 0.0;
}

constexpr ResampleFilter kBicubic{"bicubic", bicubic_weight, 2.0};
constexpr ResampleFilter kLanczos{"lanczos", lanczos_weight, 3.0};

// The taps of one axis: output pixel i reads the input pixels first[i] .. first[i] + count[i] - 1
// with the fixed-point weights weights[i * max_taps + j].
struct AxisTaps {
  int64_t max_taps = 0;
  std::vector<int64_t> first, count;
  std::vector<int32_t> weights;  // [out_size, max_taps]
};

// Pillow's precompute_coeffs and normalize_coeffs_8bpc for the box of the whole axis.
AxisTaps axis_taps(int64_t in_size, int64_t out_size, const ResampleFilter& filter) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  // Downsampling stretches the kernel over `scale` input pixels per output pixel (an average).
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter.support * filter_scale;
  const double inv_filter_scale = 1.0 / filter_scale;

  AxisTaps taps;
  taps.max_taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  taps.first.resize(static_cast<size_t>(out_size));
  taps.count.resize(static_cast<size_t>(out_size));
  taps.weights.assign(static_cast<size_t>(out_size * taps.max_taps), 0);
  std::vector<double> weight(static_cast<size_t>(taps.max_taps));
  for (int64_t i = 0; i < out_size; ++i) {
    const double center = (static_cast<double>(i) + 0.5) * scale;
    // C's (int) truncation toward zero, then clipped to the image.
    const int64_t first = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t end = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in_size);
    const int64_t count = end - first;
    double total = 0.0;
    for (int64_t j = 0; j < count; ++j) {
      const double w = filter.weight((static_cast<double>(j + first) - center + 0.5) * inv_filter_scale);
      weight[static_cast<size_t>(j)] = w;
      total += w;
    }
    if (total != 0.0)
      for (int64_t j = 0; j < count; ++j) weight[static_cast<size_t>(j)] /= total;
    int32_t* fixed = &taps.weights[static_cast<size_t>(i * taps.max_taps)];
    for (int64_t j = 0; j < count; ++j) {
      const double w = weight[static_cast<size_t>(j)];
      // Rounded half away from zero, as C's (int)(w * 2^22 +- 0.5).
      fixed[j] = static_cast<int32_t>(w < 0 ? -0.5 + w * (1 << kPrecisionBits) : 0.5 + w * (1 << kPrecisionBits));
    }
    taps.first[static_cast<size_t>(i)] = first;
    taps.count[static_cast<size_t>(i)] = count;
  }
  return taps;
}

// A fixed-point sum (with its rounding half, 2^21, already in) back to 8 bits.
uint8_t clip8(int64_t sum) {
  return static_cast<uint8_t>(std::clamp<int64_t>(sum >> kPrecisionBits, 0, 255));
}

// [height, in_width, 3] -> [height, out_width, 3]
RgbImage resample_horizontal(const RgbImage& in, int64_t out_width, const AxisTaps& taps) {
  RgbImage out{out_width, in.height, std::vector<uint8_t>(static_cast<size_t>(out_width * in.height * 3))};
  for (int64_t y = 0; y < in.height; ++y) {
    const uint8_t* row = &in.rgb[static_cast<size_t>(y * in.width * 3)];
    for (int64_t x = 0; x < out_width; ++x) {
      const int32_t* k = &taps.weights[static_cast<size_t>(x * taps.max_taps)];
      const int64_t first = taps.first[static_cast<size_t>(x)], count = taps.count[static_cast<size_t>(x)];
      for (int c = 0; c < 3; ++c) {
        int64_t sum = int64_t{1} << (kPrecisionBits - 1);
        for (int64_t j = 0; j < count; ++j) sum += int64_t{row[(first + j) * 3 + c]} * k[j];
        out.rgb[static_cast<size_t>((y * out_width + x) * 3 + c)] = clip8(sum);
      }
    }
  }
  return out;
}

// [in_height, width, 3] -> [out_height, width, 3]
RgbImage resample_vertical(const RgbImage& in, int64_t out_height, const AxisTaps& taps) {
  const int64_t row_size = in.width * 3;
  RgbImage out{in.width, out_height, std::vector<uint8_t>(static_cast<size_t>(row_size * out_height))};
  for (int64_t y = 0; y < out_height; ++y) {
    const int32_t* k = &taps.weights[static_cast<size_t>(y * taps.max_taps)];
    const int64_t first = taps.first[static_cast<size_t>(y)], count = taps.count[static_cast<size_t>(y)];
    const uint8_t* rows = &in.rgb[static_cast<size_t>(first * row_size)];
    for (int64_t i = 0; i < row_size; ++i) {  // every (x, c) of the row
      int64_t sum = int64_t{1} << (kPrecisionBits - 1);
      for (int64_t j = 0; j < count; ++j) sum += int64_t{rows[j * row_size + i]} * k[j];
      out.rgb[static_cast<size_t>(y * row_size + i)] = clip8(sum);
    }
  }
  return out;
}

void check_resize(const RgbImage& image, int64_t width, int64_t height, const ResampleFilter& filter) {
  // Far past any input the pipelines take; keeps every size product in int64 (Pillow's sides are C ints).
  constexpr int64_t kMaxSide = int64_t{1} << 20;
  if (image.width < 1 || image.height < 1 || image.width > kMaxSide || image.height > kMaxSide)
    fail_input("{} resize: the input image is {}x{} (width x height); each side must be 1..{}", filter.name,
               image.width, image.height, kMaxSide);
  if (image.rgb.size() != static_cast<size_t>(image.width * image.height * 3))
    fail_input("{} resize: a {}x{} RGB image holds {} bytes, expected {}", filter.name, image.width, image.height,
               image.rgb.size(), image.width * image.height * 3);
  if (width < 1 || height < 1 || width > kMaxSide || height > kMaxSide)
    fail_input("{} resize of a {}x{} image to {}x{} (width x height): each side must be 1..{}", filter.name,
               image.width, image.height, width, height, kMaxSide);
}

// Pillow 13's pass order (ImagingResampleInner): the vertical pass first when the height shrinks
// by more than twice as many pixels as the width does, else the horizontal first. The order shows
// in the result, since each pass rounds to uint8.
bool vertical_pass_first(const RgbImage& image, int64_t width, int64_t height) {
  return height < image.height && image.height - height > 2 * (image.width - width);
}

// A pass runs only for an axis that changes size, so the same size is a copy.
RgbImage resize(const RgbImage& image, int64_t width, int64_t height, const ResampleFilter& filter) {
  check_resize(image, width, height, filter);
  if (width == image.width && height == image.height) return image;
  const auto horizontal = [&](const RgbImage& in) {
    return in.width == width ? in : resample_horizontal(in, width, axis_taps(in.width, width, filter));
  };
  const auto vertical = [&](const RgbImage& in) {
    return in.height == height ? in : resample_vertical(in, height, axis_taps(in.height, height, filter));
  };
  return vertical_pass_first(image, width, height) ? horizontal(vertical(image)) : vertical(horizontal(image));
}

}  // namespace

RgbImage resize_bicubic(const RgbImage& image, int64_t width, int64_t height) {
  return resize(image, width, height, kBicubic);
}

RgbImage resize_lanczos(const RgbImage& image, int64_t width, int64_t height) {
  return resize(image, width, height, kLanczos);
}

}  // namespace ditbatch
