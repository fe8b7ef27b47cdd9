#include "selftest/pipeline_check.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/fs.h"
#include "convert/convert.h"
#include "io/h5.h"
#include "convert/tiny_pipeline.h"
#include "pipeline/image_model.h"
#include "pipeline/input_images.h"

namespace ditbatch::selftest {

ImageAgreement compare_images(const GeneratedImage& image, const Tensor& reference_latents,
                              const std::vector<uint8_t>& reference_rgb) {
  ImageAgreement a;
  if (!image.ok) {
    a.error = image.error;
    return a;
  }
  const Tensor got = image.latents.to_f32(), ref = reference_latents.to_f32();
  if (got.numel() != ref.numel() || image.pixels.size() != reference_rgb.size()) {
    a.error = fmt::format("latents {} / image {} values where the reference has {} / {}", got.numel(),
                          image.pixels.size(), ref.numel(), reference_rgb.size());
    return a;
  }
  double num = 0, den = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double x = got.data<float>()[i], y = ref.data<float>()[i];
    a.nonfinite += !std::isfinite(x);
    num += (x - y) * (x - y);
    den += y * y;
  }
  a.latents_nmse = den > 0 ? num / den : num;
  int64_t equal = 0;
  double mse = 0;
  for (size_t i = 0; i < reference_rgb.size(); ++i) {
    const int64_t d = std::abs(int64_t{image.pixels[i]} - int64_t{reference_rgb[i]});
    equal += d == 0;
    a.max_pixel_diff = std::max(a.max_pixel_diff, d);
    mse += static_cast<double>(d * d);
  }
  const double n = static_cast<double>(std::max<size_t>(reference_rgb.size(), 1));
  mse /= n;
  a.equal_fraction = static_cast<double>(equal) / n;
  a.psnr_db = mse > 0 ? 10.0 * std::log10(255.0 * 255.0 / mse) : 99.0;
  return a;
}

ImageBound image_bound(DType act, bool bitwise) {
  if (bitwise) return {0.0, 99.0, 0};
  // bf16: one rounding per op over ~100 ops; these bounds catch a broken kernel, not grade bf16.
  return act == DType::F32 ? ImageBound{1e-7, 50.0, 255} : ImageBound{1e-3, 30.0, 255};
}

std::string image_failure(const ImageAgreement& a, const ImageBound& bound) {
  if (!a.error.empty()) return a.error;
  if (a.nonfinite > 0) return fmt::format("{} NaN/Inf value(s) in the latents", a.nonfinite);
  if (!(a.latents_nmse <= bound.latents_nmse))
    return fmt::format("latents nmse {:.3g} above {:.3g}", a.latents_nmse, bound.latents_nmse);
  if (!(a.psnr_db >= bound.psnr_db)) return fmt::format("image PSNR {:.1f} dB below {:.0f} dB", a.psnr_db, bound.psnr_db);
  if (a.max_pixel_diff > bound.max_pixel_diff)
    return fmt::format("a pixel value differs by {}, more than {}", a.max_pixel_diff, bound.max_pixel_diff);
  return "";
}

std::vector<ImageJob> tiny_pipeline_jobs(const ImageModel& model, const std::string& folder) {
  const GenerationDefaults family = model.generation_defaults();
  // A model that takes images encodes each at ~1024x1024 (the VAE encoder, 4096 condition tokens
  // in the transformer) whatever the output size: one job, or its check alone takes half a minute.
  const std::vector<std::string> prompts = {
      "a cat", "a lighthouse on a rocky coast at dawn, gulls over the waves, oil painting"};
  std::vector<ImageJob> jobs(model.min_input_images() > 0 ? 1 : prompts.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    ImageJob& j = jobs[i];
    j.prompt = prompts[i];
    j.index = static_cast<int64_t>(i);
    j.negative_prompt = std::string(" ");
    j.seed = 42 + i;
    // Non-square both ways, at the family's size multiple (48 is no multiple of 32).
    const int64_t short_side = family.size_multiple == 16 ? 48 : family.size_multiple;
    j.width = i == 0 ? 64 : short_side;
    j.height = i == 0 ? short_side : 64;
    j.steps = family.fixed_steps > 0 ? family.fixed_steps : 3;
    j.cfg = 4.0f;
    j.true_cfg = true;
    j.file_stem = fmt::format("{:06d}-selftest", i);
    j.origin = "selftest";
    add_synthetic_input_images(j, model, folder);
  }
  return jobs;
}

void write_tiny_model(const std::string& path, const std::string& tokenizer_dir, const std::string& model) {
  TinyPipelineOptions o;
  o.out = path;
  o.model = model;
  o.seed = 5;
  o.tokenizer_dir = tokenizer_dir;
  make_tiny_pipeline(o, Log::quiet());
}

std::vector<GeneratedImage> run_pipeline(Backend& be, const WeightStore& weights, const std::vector<ImageJob>& jobs,
                                         const Log& log) {
  const std::unique_ptr<ImageModel> model = ImageModel::open(weights);
  const std::unique_ptr<ImageGenerator> generator =
      model->make_generator(be, log, model->default_max_sequence_length());
  ImageGenerator& pipeline = *generator;
  std::vector<PromptEmbedding> prompts, negatives;
  for (const auto& j : jobs) {
    prompts.push_back(pipeline.encode_prompt(j.prompt, j.images, nullptr));
    negatives.push_back(j.true_cfg ? pipeline.encode_prompt(j.negative_prompt, j.images, nullptr) : PromptEmbedding{});
  }
  pipeline.load_denoiser(jobs);  // conditioning at load, as generate does
  std::vector<GeneratedImage> images;
  for (size_t i = 0; i < jobs.size(); ++i) {
    StageTimes times;
    images.push_back(pipeline.generate(jobs[i], prompts[i], jobs[i].true_cfg ? &negatives[i] : nullptr, nullptr, times));
  }
  return images;
}

std::string find_goldens() {
  const std::string dir = std::string(DITBATCH_SOURCE_DIR) + "/tests/data/golden";
  return file_exists(dir + "/pipeline.h5") && file_exists(dir + "/tiny-pipeline/model_index.json") ? dir : "";
}

ImageJob golden_job(const h5::Group& g) {
  ImageJob job;
  job.prompt = g.attr_string("prompt");
  job.negative_prompt = g.attr_string("negative_prompt");
  job.seed = static_cast<uint64_t>(g.attr_int("seed"));
  job.width = g.attr_int("width");
  job.height = g.attr_int("height");
  job.steps = g.attr_int("steps");
  job.cfg = static_cast<float>(g.attr_double("true_cfg_scale"));
  job.true_cfg = g.attr_int("true_cfg") != 0;
  return job;
}

std::vector<GoldenCase> golden_cases(const std::string& goldens, bool quick) {
  h5::File f = h5::File::open_read(goldens + "/pipeline.h5");
  const h5::Group cases = f.root().open_group("cases");
  std::vector<GoldenCase> out;
  const std::vector<std::string> names = cases.members();
  for (size_t i = 0; i < names.size(); i += quick ? 6 : 3) {
    const h5::Group g = cases.open_group(names[i]);
    GoldenCase c;
    c.job = golden_job(g);
    c.job.index = static_cast<int64_t>(i);
    c.job.file_stem = "golden-" + names[i];
    c.latents = g.read_tensor("final_latents").to_f32();
    c.latents = c.latents.view({c.latents.numel() / c.latents.dim(-1), c.latents.dim(-1)});  // [1, S, 64] -> [S, 64]
    const Tensor rgb = g.read_tensor("image_uint8");
    c.pixels.assign(rgb.data<uint8_t>(), rgb.data<uint8_t>() + rgb.numel());
    out.push_back(std::move(c));
  }
  return out;
}

void convert_golden_model(const std::string& goldens, const std::string& path) {
  ConvertOptions o;
  o.from = goldens + "/tiny-pipeline";
  o.to = path;
  convert_diffusers(o, Log::quiet());
}

}  // namespace ditbatch::selftest
