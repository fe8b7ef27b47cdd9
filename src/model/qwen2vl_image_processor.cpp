#include "model/qwen2vl_image_processor.h"

#include <cmath>

#include "core/error.h"
#include "io/config.h"
#include "io/json_text.h"
#include "model/edit_image_sizes.h"
#include "model/image_resample.h"

namespace ditbatch {

namespace {

constexpr int64_t kMaxPixelBudget = int64_t{1} << 52;  // smart_resize's float64-exact range

// image_mean / image_std: a list of 3 numbers, or one number for all channels (transformers
// accepts both), as the f32 the normalisation uses.
std::array<float, 3> channel_constants(const Config& config, const std::string& key) {
  std::array<float, 3> out{};
  const nlohmann::json& v = config.json()[key];
  if (v.is_number()) {
    out.fill(static_cast<float>(v.get<double>()));
  } else {
    const std::vector<double> values = config.get_doubles(key);
    if (values.size() != 3)
      fail_input("{}: config '{}' = {} must hold 3 numbers (one per RGB channel)", config.where(), key,
                 json_excerpt(v));
    for (size_t c = 0; c < 3; ++c) out[c] = static_cast<float>(values[c]);
  }
  for (float x : out)
    if (!std::isfinite(x)) fail_input("{}: config '{}' = {} must be finite", config.where(), key, json_excerpt(v));
  return out;
}

// A do_* switch the port implements only switched on.
void require_on(const Config& config, const std::string& key) {
  if (config.has(key) && !config.get_bool(key))
    fail_input("{}: config '{}' = false is not supported (the Edit pipelines' processor has it on)", config.where(),
               key);
}

}  // namespace

Qwen2VLImageProcessorConfig Qwen2VLImageProcessorConfig::parse(const std::string& text, const std::string& where) {
  const Config config = Config::parse(text, where);
  Qwen2VLImageProcessorConfig c;
  if (config.has("size.shortest_edge")) c.min_pixels = config.get_int("size.shortest_edge", 1, kMaxPixelBudget);
  if (config.has("size.longest_edge")) c.max_pixels = config.get_int("size.longest_edge", 1, kMaxPixelBudget);
  if (config.has("min_pixels")) c.min_pixels = config.get_int("min_pixels", 1, kMaxPixelBudget);
  if (config.has("max_pixels")) c.max_pixels = config.get_int("max_pixels", 1, kMaxPixelBudget);
  if (c.min_pixels > c.max_pixels)
    fail_input("{}: config min_pixels {} is more than max_pixels {}", where, c.min_pixels, c.max_pixels);
  if (config.has("patch_size")) c.patch_size = config.get_int("patch_size", 1, 1024);
  if (config.has("temporal_patch_size")) c.temporal_patch_size = config.get_int("temporal_patch_size", 1, 64);
  if (config.has("merge_size")) c.merge_size = config.get_int("merge_size", 1, 64);
  if (config.has("resample") && config.get_int("resample") != 3)
    fail_input("{}: config 'resample' = {} is not supported (expected 3, PIL's BICUBIC)", where,
               config.get_int("resample"));
  require_on(config, "do_resize");
  require_on(config, "do_rescale");
  require_on(config, "do_normalize");
  if (config.has("rescale_factor")) {
    c.rescale_factor = config.get_double("rescale_factor");
    if (!std::isfinite(c.rescale_factor) || c.rescale_factor <= 0)
      fail_input("{}: config 'rescale_factor' = {} must be a positive number (1/255 for 8-bit images)", where,
                 c.rescale_factor);
  }
  if (config.has("image_mean")) c.image_mean = channel_constants(config, "image_mean");
  if (config.has("image_std")) c.image_std = channel_constants(config, "image_std");
  for (float s : c.image_std)
    if (s == 0.0f) fail_input("{}: config 'image_std' has a zero entry (it divides)", where);
  return c;
}

namespace {

// The rescale and normalise of every 8-bit value, per channel, in the reference's precision:
// numpy's f32(v * rescale in f64), then (x - f32 mean) / f32 std in f32.
std::array<std::array<float, 256>, 3> normalized_values(const Qwen2VLImageProcessorConfig& config) {
  std::array<std::array<float, 256>, 3> table{};
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) {
      const float rescaled = static_cast<float>(static_cast<double>(v) * config.rescale_factor);
      table[c][v] = (rescaled - config.image_mean[c]) / config.image_std[c];
    }
  return table;
}

// Appends one image's patches: [3, H, W] viewed as [3, gh/m, m, p, gw/m, m, p], transposed to
// (gh/m, gw/m, m, m, 3, p, p) and repeated along a temporal axis after the channel.
void append_patches(const RgbImage& image, const Qwen2VLImageProcessorConfig& config,
                    const std::array<std::array<float, 256>, 3>& values, Qwen2VLImageInputs& out) {
  const int64_t p = config.patch_size, m = config.merge_size, T = config.temporal_patch_size;
  const int64_t grid_h = image.height / p, grid_w = image.width / p;
  const int64_t dim = config.patch_dim();
  size_t row = out.pixel_values.size();
  out.pixel_values.resize(row + static_cast<size_t>(grid_h * grid_w * dim));
  for (int64_t block_h = 0; block_h < grid_h / m; ++block_h)
    for (int64_t block_w = 0; block_w < grid_w / m; ++block_w)
      for (int64_t merge_h = 0; merge_h < m; ++merge_h)
        for (int64_t merge_w = 0; merge_w < m; ++merge_w) {
          const int64_t y0 = (block_h * m + merge_h) * p, x0 = (block_w * m + merge_w) * p;
          float* patch = &out.pixel_values[row];  // [3, T, p, p]
          for (int c = 0; c < 3; ++c)
            for (int64_t t = 0; t < T; ++t)
              for (int64_t py = 0; py < p; ++py)
                for (int64_t px = 0; px < p; ++px)
                  patch[((c * T + t) * p + py) * p + px] = values[c][image.at(y0 + py, x0 + px, c)];
          row += static_cast<size_t>(dim);
        }
  out.num_patches += grid_h * grid_w;
  out.grid_thw.push_back({1, grid_h, grid_w});
}

}  // namespace

Qwen2VLImageInputs qwen2vl_process_images(const std::vector<RgbImage>& images,
                                          const Qwen2VLImageProcessorConfig& config) {
  const auto values = normalized_values(config);
  Qwen2VLImageInputs out;
  out.patch_dim = config.patch_dim();
  for (const RgbImage& image : images) {
    const ImageSize size = smart_resize(image.height, image.width, config.patch_size * config.merge_size,
                                        config.min_pixels, config.max_pixels);
    append_patches(resize_bicubic(image, size.width, size.height), config, values, out);  // same size: a copy
  }
  return out;
}

Qwen2VLImageInputs qwen2vl_process_image(const RgbImage& image, const Qwen2VLImageProcessorConfig& config) {
  return qwen2vl_process_images({image}, config);
}

}  // namespace ditbatch
