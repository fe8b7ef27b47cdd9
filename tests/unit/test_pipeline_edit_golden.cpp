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
#include "pipeline/input_images.h"
#include "pipeline/qwen_image_edit_model.h"
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

int64_t spec_bytes(const std::vector<WeightSpec>& specs, int64_t dtype_size) {
  int64_t n = 0;
  for (const WeightSpec& s : specs) n += shape_numel(s.shape);
  return n * dtype_size;
}

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
// diffusers takes from its last image; a rerun finds every image complete, and remakes those
// whose input image changed.
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
    if (cases.size() == 1) {
      // Its input replaced by other bytes: the two edits of it are made again, from the new file,
      // and record its new sha256.
      const std::string input = dir / ("prompts/pictures/" + first.images.back());
      const std::string other = first.images.back() == "grey.jpg" ? "q90_420.jpg" : "grey.jpg";
      fs::copy_file(test::golden("input_images/" + other), input, fs::copy_options::overwrite_existing);
      r = test::run(command);
      ASSERT_EQ(r.status, 0) << r.output;
      EXPECT_TRUE(says(r.output, "2 done, 0 skipped")) << r.output;
      const std::map<std::string, std::string> text = [&] {
        const PngImage png = read_png(out + "/" + first.name + ".png");
        return std::map<std::string, std::string>(png.text.begin(), png.text.end());
      }();
      EXPECT_EQ(nlohmann::json::parse(text.at("input_images"))[0]["sha256"], sha256_hex(test::read_text(input)));
    }
  }
}

namespace {

// A w x h RGB PNG of a deterministic gradient, at `path`.
void write_gradient_png(const std::string& path, int64_t width, int64_t height) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width * height * 3));
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * 7 + i / 3) % 251);
  test::write_text(path, encode_png(rgb.data(), width, height, 3, {}));
}

}  // namespace

// A side the line leaves out is the one diffusers takes from the last image (height = height or
// calculated_height); --image gives every --prompt its images; an image whose aspect the
// pipeline's resizes round to nothing, or whose output would be past 8192 a side, is refused
// before any weight is read, naming the line and the file.
TEST(GenerateEdit, SizesFromTheImageAndImagesForPromptsFromTheCommandLine) {
  TempDir dir;
  const h5::File f = h5::File::open_read(test::golden("pipeline_edit.h5"));
  const EditCase c = case_of("plus2511_one_jpeg", case_group(f, "plus2511_one_jpeg"));
  const std::string weights = edit_weights(c.overlay), jpeg = test::golden("input_images/" + c.images[0]);
  test::write_text(dir / "p.jsonl", nlohmann::json({{"prompt", c.prompt}, {"width", 64}, {"steps", 2}, {"name", "w64"},
                                                    {"image", jpeg}})
                                            .dump() +
                                        "\n");
  auto r = test::run(fmt::format("{} generate --weights {} --out {} --prompts {}", test::exe(), weights, dir / "a",
                                 dir / "p.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  const PngImage w64 = read_png(dir / "a/w64.png");
  EXPECT_EQ(w64.width, 64);
  EXPECT_EQ(w64.height, c.default_height);

  // --prompt with --image: the case's image and settings, diffusers' pixels; the same with every
  // prompt encoded (with its images) before the denoiser loads.
  for (const std::string offload : {"", " --offload-text-encoder"}) {
    SCOPED_TRACE(offload);
    const std::string out = dir / (offload.empty() ? "b" : "b-offload");
    r = test::run(fmt::format("{} generate --weights {} --out {} --prompt '{}' --image {} --negative-prompt '{}' --seed {} "
                              "--cfg {} --steps {} --width {} --height {}{}",
                              test::exe(), weights, out, c.prompt, jpeg, c.negative_prompt, c.seed, c.cfg, c.steps,
                              c.width, c.height, offload));
    ASSERT_EQ(r.status, 0) << r.output;
    std::vector<std::string> pngs;
    for (const auto& entry : fs::directory_iterator(out))
      if (entry.path().extension() == ".png") pngs.push_back(entry.path());
    ASSERT_EQ(pngs.size(), 1u);
    const PngImage made = read_png(pngs[0]);
    expect_pixels(made.pixels.data(), std::ssize(made.pixels), case_group(f, c.name).read_tensor("image_uint8"), c.name);
  }

  // No image for an edit model, --image with a prompt file: refused, nothing made.
  r = test::run(fmt::format("{} generate --weights {} --out {} --prompt x", test::exe(), weights, dir / "c"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(says(r.output, "--prompt #1: 0 images given, but Qwen-Image-Edit-2511 (QwenImageEditPlusPipeline) edits "
                             "images: give at least 1 image (\"image\" in a prompt line, --image with --prompt)"))
      << r.output;
  r = test::run(fmt::format("{} generate --weights {} --out {} --prompts {} --image {}", test::exe(), weights, dir / "c",
                            dir / "p.jsonl", jpeg));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(says(r.output, "--image is for --prompt")) << r.output;

  // 1 x 600: Edit-Plus's prompt side (384² at its aspect) rounds its width to 0. 20 x 4000 sizes
  // fine on both sides, but the output it gives (1024² at its aspect: 64 x 14496) is past 8192.
  write_gradient_png(dir / "thin.png", 1, 600);
  write_gradient_png(dir / "tall.png", 20, 4000);
  r = test::run(fmt::format("{} generate --weights {} --out {} --prompt x --image {} --width 64 --height 64",
                            test::exe(), weights, dir / "c", dir / "thin.png"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(says(r.output, "--prompt #1: \"image\" " + (dir / "thin.png") + " is 1x600: at the Edit pipeline's area "
                             "of 147456 pixels its aspect rounds to 0x"))
      << r.output;
  // A 1 x 100000 strip decodes (10^5 pixels), but no side of it survives the pipeline's resizes.
  write_gradient_png(dir / "strip.png", 1, 100000);
  r = test::run(fmt::format("{} generate --weights {} --out {} --prompt x --image {}", test::exe(), weights, dir / "c",
                            dir / "strip.png"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(says(r.output, "\"image\" " + (dir / "strip.png") + " is 1x100000: at the Edit pipeline's area of"))
      << r.output;
  r = test::run(fmt::format("{} generate --weights {} --out {} --prompt x --image {}", test::exe(), weights, dir / "c",
                            dir / "tall.png"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(says(r.output, "is past 8192 pixels a side; give width and height")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "c"));
}

// The estimates count what the pipelines run: the condition tokens diffusers encoded (its
// condition latents' rows), a text bound no smaller than its prompt embeddings, the vision tower
// and the VAE encoder among the weights (their own weight specs, an independent count).
TEST(EditMemoryPlan, CountsTheConditionTokensTheTowerAndTheVaeEncoder) {
  const h5::File f = h5::File::open_read(test::golden("pipeline_edit.h5"));
  for (const std::string& name : case_names()) {
    SCOPED_TRACE(name);
    const h5::Group g = case_group(f, name);
    const EditCase c = case_of(name, g);
    const WeightStore weights = WeightStore::open(edit_weights(c.overlay));
    const std::unique_ptr<ImageModel> model = ImageModel::open(weights);
    const auto& edit = dynamic_cast<const QwenImageEditModel&>(*model);
    std::vector<ImageJob> jobs = {job_of(c)};
    inspect_input_images(jobs, 1);
    const QwenImageEditModel::JobShape shape = edit.shape_of(jobs[0]);
    EXPECT_EQ(shape.noise_tokens, g.read_tensor("noise").dim(1));
    EXPECT_EQ(shape.condition_tokens, g.read_tensor("condition_latents").dim(1));
    const int64_t text = std::max(g.read_tensor("prompt_embeds").dim(1), g.read_tensor("negative_prompt_embeds").dim(1));
    EXPECT_GE(shape.text_tokens, text);
    EXPECT_LE(shape.text_tokens, text + 64);

    const DeviceMemoryPlan plan = model->device_memory(2, jobs, 0, SchedulerConfig{});
    const Component te = weights.component("text_encoder"), vae = weights.component("vae");
    const VaeConfig vc = VaeConfig::from(vae.config());
    EXPECT_EQ(plan.text_encoder,
              spec_bytes(QwenTextEncoder::weight_specs(TextEncoderConfig::from(te.config()), QwenTextEncoder::tensor_prefix(te)), 2) +
                  spec_bytes(QwenVisionTower::weight_specs(VisionConfig::from(te.config())), 2));
    EXPECT_EQ(plan.vae, spec_bytes(VaeDecoder::weight_specs(vc), 2) + spec_bytes(VaeEncoder::weight_specs(vc), 2));
    // One more image: more work per step (its condition tokens), the same weights.
    std::vector<ImageJob> more = jobs;
    more[0].images.push_back(more[0].images.back());
    const DeviceMemoryPlan bigger = model->device_memory(2, more, 0, SchedulerConfig{});
    EXPECT_GE(bigger.denoise_activations, plan.denoise_activations);
    EXPECT_EQ(bigger.text_encoder + bigger.transformer + bigger.vae, plan.text_encoder + plan.transformer + plan.vae);
    EXPECT_GT(model->host_run(more, 0).image_flops, model->host_run(jobs, 0).image_flops);
    EXPECT_GT(edit.shape_of(more[0]).condition_tokens, shape.condition_tokens);
  }
}

// The Lightning command line on Edit-2511: a LoRA in ComfyUI/LightX2V keys merged into the
// transformer, the lightning scheduler, no CFG; diffusers' latents and image
// (load_lora_weights + set_adapters on QwenImageEditPlusPipeline).
TEST(GenerateEdit, ALoraAndTheLightningSchedulerMakeDiffusersImage) {
  TempDir dir;
  const h5::File f = h5::File::open_read(test::golden("pipeline_edit.h5"));
  const h5::Group g = f.root().open_group("lora").open_group("plus2511_lora_lightning");
  const std::vector<std::string> images = nlohmann::json::parse(g.attr_string("images")).get<std::vector<std::string>>();
  const std::vector<std::string> loras = nlohmann::json::parse(g.attr_string("lora_files")).get<std::vector<std::string>>();
  const std::vector<double> strengths = g.attr_doubles("lora_strengths");
  ASSERT_EQ(images.size(), 1u);
  ASSERT_EQ(loras.size(), 1u);
  ASSERT_EQ(g.attr_string("scheduler"), "lightning");
  const auto r = test::run(fmt::format(
      "{} generate --weights {} --out {} --prompt '{}' --image {} --lora {}:{} --scheduler lightning --cfg 1 --steps {} "
      "--seed {} --width {} --height {} --output-type latent",
      test::exe(), edit_weights(g.attr_string("pipeline")), dir / "out", g.read_bytes("prompt_utf8"),
      test::golden("input_images/" + images[0]), test::golden("lora/" + loras[0]), strengths[0], g.attr_int("steps"),
      g.attr_int("seed"), g.attr_int("width"), g.attr_int("height")));
  ASSERT_EQ(r.status, 0) << r.output;
  std::string stem;
  for (const auto& entry : fs::directory_iterator(dir / "out"))
    if (entry.path().extension() == ".png") stem = entry.path().stem();
  ASSERT_FALSE(stem.empty()) << r.output;
  const PngImage png = read_png(dir / ("out/" + stem + ".png"));
  expect_pixels(png.pixels.data(), std::ssize(png.pixels), g.read_tensor("image_uint8"), "image_uint8");
  const Tensor want = test::squeeze0(g.read_tensor("final_latents"));  // [S0, 64]
  const Tensor got = h5::File::open_read(dir / ("out/" + stem + ".latents.h5")).root().read_tensor("latents");
  expect_close(got.view(want.shape()), want, "final latents");
  const std::map<std::string, std::string> text(png.text.begin(), png.text.end());
  EXPECT_TRUE(says(text.at("parameters"), "<lora:comfy_bf16:1>")) << text.at("parameters");
}

// --text-positions mrope: the image tokens numbered as the model was trained (get_rope_index,
// checked against transformers in test_text_encoder_edit_golden.cpp) reach the encoder, change the
// image, and are part of its record: the PNG text, the manifest line, and a rerun without the
// option is refused as other settings. A text-to-image model and an unknown mode are refused.
TEST(GenerateEdit, TextPositionsMropeIsUsedAndRecorded) {
  TempDir dir;
  const h5::File f = h5::File::open_read(test::golden("pipeline_edit.h5"));
  const EditCase c = case_of("plus2511_one_jpeg", case_group(f, "plus2511_one_jpeg"));
  const std::string weights = edit_weights(c.overlay), jpeg = test::golden("input_images/" + c.images[0]);
  const std::string base = fmt::format("{} generate --weights {} --prompt '{}' --image {} --seed {} --steps {} --width {} "
                                       "--height {}",
                                       test::exe(), weights, c.prompt, jpeg, c.seed, c.steps, c.width, c.height);
  auto r = test::run(base + " --out " + (dir / "m") + " --text-positions mrope");
  ASSERT_EQ(r.status, 0) << r.output;
  std::string stem;
  for (const auto& entry : fs::directory_iterator(dir / "m"))
    if (entry.path().extension() == ".png") stem = entry.path().stem();
  const PngImage png = read_png(dir / ("m/" + stem + ".png"));
  const std::map<std::string, std::string> text(png.text.begin(), png.text.end());
  EXPECT_EQ(text.at("text_positions"), "mrope");
  EXPECT_TRUE(says(text.at("parameters"), ", Text positions: mrope")) << text.at("parameters");
  EXPECT_TRUE(says(test::read_text(dir / "m/manifest.jsonl"), "\"text_positions\":\"mrope\""));
  // Not diffusers' (sequential) image: the positions reached the text encoder.
  const test::RgbAgreement agreement =
      test::rgb_agreement(png.pixels.data(), std::ssize(png.pixels), case_group(f, c.name).read_tensor("image_uint8"));
  EXPECT_LT(agreement.equal_fraction, 0.9);

  r = test::run(base + " --out " + (dir / "m"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(says(r.output, "text_positions mrope, now sequential")) << r.output;
  r = test::run(base + " --out " + (dir / "m") + " --text-positions mrope");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(says(r.output, "every image of this slice is complete")) << r.output;

  r = test::run(base + " --out " + (dir / "x") + " --text-positions 3d");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(says(r.output, "--text-positions '3d' (expected sequential")) << r.output;
  r = test::run(fmt::format("{} generate --weights {} --prompt x --out {} --text-positions mrope", test::exe(),
                            test::golden_weights(), dir / "x"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(says(r.output, "--text-positions mrope: Qwen-Image (QwenImagePipeline) takes no input image")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "x"));
}
