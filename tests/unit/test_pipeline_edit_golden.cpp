// The whole tiny Edit pipelines against diffusers (tests/data/golden/pipeline_edit.h5): Edit-2511
// (zero_cond_t) with one JPEG and with two PNGs (RGBA, palette), Edit-2509 with a WebP and a
// negative prompt, Edit with a grey JPEG; true CFG, 2 steps. Each converted from tiny-pipeline/
// with its overlay folder (model_index.json, processor/, transformer/config.json) by ditbatch's
// own converter, then run through QwenImageEditPipeline and through `ditbatch generate`.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/sha256.h"
#include "cpu/cpu_backend.h"
#include "golden.h"
#include "io/h5.h"
#include "io/png_io.h"
#include "model/latent_packing.h"
#include "model/noise.h"
#include "pipeline/image_model.h"
#include "pipeline/qwen_image_edit_pipeline.h"
#include "test_util.h"

using namespace ditbatch;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

// tiny-pipeline/ with the overlay folder `overlay` laid over it, converted once per process.
const std::string& edit_weights(const std::string& overlay) {
  static std::map<std::string, std::pair<std::unique_ptr<TempDir>, std::string>> converted;
  auto& [dir, path] = converted[overlay];
  if (path.empty()) {
    dir = std::make_unique<TempDir>();
    const std::string folder = *dir / overlay;
    fs::copy(test::golden("tiny-pipeline"), folder, fs::copy_options::recursive);
    fs::copy(test::golden(overlay), folder, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    path = *dir / (overlay + ".h5");
    ConvertOptions opt;
    opt.from = folder;
    opt.to = path;
    convert_diffusers(opt, Log::quiet());
  }
  return path;
}

struct EditCase {
  std::string name, overlay, pipeline_class, prompt, negative_prompt;
  std::vector<std::string> images;  // file names in tests/data/golden/input_images/
  double cfg = 1;
  int64_t steps = 0, width = 0, height = 0, default_width = 0, default_height = 0;
  uint64_t seed = 0;
};

EditCase case_of(const std::string& name, const h5::Group& g) {
  EditCase c;
  c.name = name;
  c.overlay = g.attr_string("pipeline");
  c.pipeline_class = g.attr_string("pipeline_class");
  c.prompt = g.read_bytes("prompt_utf8");
  c.negative_prompt = g.attr_string("negative_prompt");
  c.images = nlohmann::json::parse(g.attr_string("images")).get<std::vector<std::string>>();
  c.cfg = g.attr_double("true_cfg_scale");
  c.steps = g.attr_int("steps");
  c.width = g.attr_int("width");
  c.height = g.attr_int("height");
  c.default_width = g.attr_int("default_width");
  c.default_height = g.attr_int("default_height");
  c.seed = static_cast<uint64_t>(g.attr_int("seed"));
  return c;
}

// The job `generate` makes of the case's prompt line, its images inspected (sha256, upright size).
ImageJob job_of(const EditCase& c) {
  ImageJob job;
  job.prompt = c.prompt;
  job.negative_prompt = c.negative_prompt;
  job.seed = c.seed;
  job.width = c.width;
  job.height = c.height;
  job.steps = c.steps;
  job.cfg = static_cast<float>(c.cfg);
  job.true_cfg = c.cfg > 1;
  job.origin = "case " + c.name;
  for (const std::string& file : c.images) {
    const std::string path = test::golden("input_images/" + file);
    job.images.push_back({file, path, sha256_hex(test::read_text(path)), 0, 0});
  }
  return job;
}

h5::Group case_group(const h5::File& f, const std::string& name) { return f.root().open_group("cases").open_group(name); }

std::vector<std::string> case_names() {
  const h5::File f = h5::File::open_read(test::golden("pipeline_edit.h5"));
  return f.root().open_group("cases").members();
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_LE(test::nmse(got, want), 1e-10) << what;
  EXPECT_LT(test::max_abs_diff(got, want), 1e-4) << what;
}

void expect_pixels(const uint8_t* rgb, int64_t n, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(n, expected.numel()) << what;
  const test::RgbAgreement agreement = test::rgb_agreement(rgb, n, expected);
  EXPECT_LE(agreement.max_diff, 1) << what;
  EXPECT_GE(agreement.equal_fraction, 0.999) << what;
}

bool says(const std::string& output, const std::string& text) { return output.find(text) != std::string::npos; }

}  // namespace

class PipelineEditGolden : public ::testing::TestWithParam<std::string> {};

// Every stage diffusers recorded: the prompt and negative prompt embeddings with the images'
// rows, the packed condition latents, the noise bit for bit, the latents after the last step and
// the 8-bit image.
TEST_P(PipelineEditGolden, MatchesDiffusers) {
  const h5::File f = h5::File::open_read(test::golden("pipeline_edit.h5"));
  const h5::Group g = case_group(f, GetParam());
  const EditCase c = case_of(GetParam(), g);
  CpuBackend be;
  const Log log = Log::quiet();
  const WeightStore weights = WeightStore::open(edit_weights(c.overlay));
  ASSERT_EQ(weights.root_string("pipeline_class"), c.pipeline_class);
  const std::unique_ptr<ImageModel> model = ImageModel::open(weights);
  EXPECT_EQ(model->family(), c.pipeline_class == "QwenImageEditPipeline" ? "Qwen-Image-Edit"
                             : g.attr_int("zero_cond_t")                 ? "Qwen-Image-Edit-2511"
                                                                         : "Qwen-Image-Edit-2509");
  QwenImageEditPipeline pipeline(be, weights, log);
  const ImageJob job = job_of(c);

  const PromptEmbedding prompt = pipeline.encode_prompt(job.prompt, job.images, nullptr);
  expect_close(be.to_host_f32(prompt.embeds), test::squeeze0(g.read_tensor("prompt_embeds")), "prompt_embeds");
  EXPECT_EQ(prompt.tokens, g.read_tensor("prompt_embeds").dim(1));
  const PromptEmbedding negative = pipeline.encode_prompt(job.negative_prompt, job.images, nullptr);
  expect_close(be.to_host_f32(negative.embeds), test::squeeze0(g.read_tensor("negative_prompt_embeds")),
               "negative_prompt_embeds");

  const QwenImageEditPipeline::ConditionLatents condition = pipeline.encode_condition_latents(job);
  expect_close(be.to_host_f32(condition.latents), test::squeeze0(g.read_tensor("condition_latents")),
               "condition_latents");
  const Tensor noise = pack_latents(be, initial_noise(job.seed, 16, job.latent_h(), job.latent_w()));
  const Tensor golden_noise = test::squeeze0(g.read_tensor("noise"));
  ASSERT_EQ(noise.shape(), golden_noise.shape());
  EXPECT_EQ(std::memcmp(noise.raw(), golden_noise.raw(), noise.nbytes()), 0);

  StageTimes times;
  int steps_seen = 0;
  const GeneratedImage image = pipeline.generate(job, prompt, &negative, [&](int done, int) { steps_seen = done; }, times);
  ASSERT_TRUE(image.ok) << image.error;
  EXPECT_EQ(steps_seen, job.steps);
  expect_close(image.latents, test::squeeze0(g.read_tensor(fmt::format("latents_step_{}", job.steps - 1))),
               "final latents");
  expect_pixels(image.pixels.data(), std::ssize(image.pixels), g.read_tensor("image_uint8"), "image_uint8");
}

INSTANTIATE_TEST_SUITE_P(AllCases, PipelineEditGolden, ::testing::ValuesIn(case_names()));

// `generate` on each converted Edit folder: its cases as prompt lines (the images named relative
// to the prompt file), the PNGs diffusers' images; a line that gives no size takes the one
// diffusers takes from its last image; a rerun finds every image complete.
TEST(GenerateEdit, MakesDiffusersImagesFromTheConvertedFolders) {
  TempDir dir;
  const h5::File f = h5::File::open_read(test::golden("pipeline_edit.h5"));
  std::map<std::string, std::vector<EditCase>> by_overlay;
  for (const std::string& name : case_names()) {
    const EditCase c = case_of(name, case_group(f, name));
    by_overlay[c.overlay].push_back(c);
  }
  ASSERT_EQ(by_overlay.size(), 3u);
  fs::create_directories(dir / "prompts/pictures");
  for (const auto& [overlay, cases] : by_overlay) {
    SCOPED_TRACE(overlay);
    std::string lines;
    for (const EditCase& c : cases) {
      nlohmann::json images = nlohmann::json::array();
      for (const std::string& file : c.images) {
        fs::copy_file(test::golden("input_images/" + file), dir / ("prompts/pictures/" + file),
                      fs::copy_options::overwrite_existing);
        images.push_back("pictures/" + file);
      }
      nlohmann::json line = {{"prompt", c.prompt}, {"negative_prompt", c.negative_prompt},
                             {"seed", c.seed},     {"cfg", c.cfg},
                             {"steps", c.steps},   {"width", c.width},
                             {"height", c.height}, {"name", c.name},
                             {"image", images.size() == 1 ? images[0] : images}};
      lines += line.dump() + "\n";
    }
    // The first case again with no size: diffusers' calculate_dimensions(1024², w / h) of its last image.
    const EditCase& first = cases.front();
    nlohmann::json sized_by_image = {{"prompt", first.prompt}, {"seed", first.seed}, {"steps", 2}, {"name", "default_size"},
                                     {"image", "pictures/" + first.images.back()}};
    lines += sized_by_image.dump() + "\n";
    const std::string prompts = dir / ("prompts/" + overlay + ".jsonl");
    test::write_text(prompts, lines);
    const std::string out = dir / ("out-" + overlay);
    const std::string command = fmt::format("{} generate --weights {} --out {} --prompts {}", test::exe(),
                                            edit_weights(overlay), out, prompts);
    auto r = test::run(command);
    ASSERT_EQ(r.status, 0) << r.output;
    for (const EditCase& c : cases) {
      const PngImage png = read_png(out + "/" + c.name + ".png");
      EXPECT_EQ(png.width, c.width);
      EXPECT_EQ(png.height, c.height);
      expect_pixels(png.pixels.data(), std::ssize(png.pixels), case_group(f, c.name).read_tensor("image_uint8"), c.name);
      const std::map<std::string, std::string> text(png.text.begin(), png.text.end());
      ASSERT_TRUE(text.count("input_images")) << c.name;
      const nlohmann::json recorded = nlohmann::json::parse(text.at("input_images"));
      ASSERT_EQ(recorded.size(), c.images.size());
      for (size_t k = 0; k < c.images.size(); ++k) {
        EXPECT_EQ(recorded[k]["path"], "pictures/" + c.images[k]);
        EXPECT_EQ(recorded[k]["sha256"], sha256_hex(test::read_text(test::golden("input_images/" + c.images[k]))));
      }
    }
    const PngImage sized = read_png(out + "/default_size.png");
    EXPECT_EQ(sized.width, first.default_width);
    EXPECT_EQ(sized.height, first.default_height);
    // Every image is complete: nothing is made again.
    r = test::run(command);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(says(r.output, "every image of this slice is complete")) << r.output;
  }
}
