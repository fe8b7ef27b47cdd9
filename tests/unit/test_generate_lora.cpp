// `ditbatch generate --lora ... --scheduler ...` end to end: the command line a user types makes
// diffusers' image of the golden case (load_lora_weights + set_adapters, lora.h5), records its
// LoRAs and scheduler in the PNG and the manifest, and a rerun with another LoRA set or
// scheduler is refused, one with the same set in another order is not.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "core/sha256.h"
#include "golden.h"
#include "io/h5.h"
#include "io/manifest.h"
#include "io/png_io.h"

using namespace ditbatch;
using test::TempDir;

namespace {

std::string lora_file(const std::string& name) { return test::golden("lora/" + name); }

// The golden case's job as generate options, into `out`, with `extra` (the LoRAs, the scheduler).
std::string case_cmd(const ImageJob& job, const std::string& out, const std::string& extra) {
  return fmt::format("{} generate --weights {} --out {} --prompt '{}' --width {} --height {} --steps {} --seed {} "
                     "--cfg {} --max-sequence-length 512 {}",
                     test::exe(), test::golden_weights(), out, job.prompt, job.width, job.height, job.steps, job.seed,
                     job.true_cfg ? job.cfg : 1.0f, extra);
}

// The one PNG of a run's folder.
std::string only_png(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".png") names.push_back(e.path().filename().string());
  EXPECT_EQ(names.size(), 1u);
  return names.empty() ? "" : names[0];
}

std::map<std::string, std::string> text_of(const PngImage& png) {
  return std::map<std::string, std::string>(png.text.begin(), png.text.end());
}

// Runs the golden case's job with `extra` into `out` and checks its PNG against diffusers' image;
// the PNG (none when the run failed).
PngImage generate_like_diffusers(const h5::Group& g, const std::string& out, const std::string& extra) {
  auto r = test::run(case_cmd(test::golden_pipeline_job(g), out, extra));
  EXPECT_EQ(r.status, 0) << r.output;
  if (r.status != 0) return {};
  PngImage png = read_png(out + "/" + only_png(out));
  const Tensor expected = g.read_tensor("image_uint8");
  EXPECT_EQ(static_cast<int64_t>(png.pixels.size()), expected.numel());
  if (static_cast<int64_t>(png.pixels.size()) != expected.numel()) return {};
  const test::RgbAgreement a = test::rgb_agreement(png.pixels.data(), expected.numel(), expected);
  EXPECT_LE(a.max_diff, 1);
  EXPECT_GE(a.equal_fraction, 0.999);
  return png;
}

}  // namespace

// Golden case 7: the Lightning command line of the README (one LoRA, --scheduler lightning,
// 8 steps, --cfg 1).
TEST(GenerateLora, TheLightningCommandLineMakesDiffusersImage) {
  h5::File f = h5::File::open_read(test::golden("lora.h5"));
  const h5::Group g = f.root().open_group("cases").open_group("07");
  ASSERT_EQ(g.attr_string("scheduler"), "lightning");
  ASSERT_EQ(g.attr_string("lora_files"), "[\"comfy_bf16.safetensors\"]");
  const ImageJob job = test::golden_pipeline_job(g);
  ASSERT_FALSE(job.true_cfg);
  ASSERT_EQ(job.steps, 8);
  TempDir dir;
  const PngImage png =
      generate_like_diffusers(g, dir / "out", "--lora " + lora_file("comfy_bf16.safetensors") + " --scheduler lightning");
  ASSERT_FALSE(png.pixels.empty());
  const std::string name = only_png(dir / "out");
  auto t = text_of(png);
  EXPECT_NE(t["scheduler"].find("base_shift=1.0986122886681098, max_shift=1.0986122886681098"), std::string::npos)
      << t["scheduler"];
  EXPECT_NE(t["scheduler"].find("shift_terminal=none"), std::string::npos) << t["scheduler"];
  EXPECT_NE(t["parameters"].find("hello world <lora:comfy_bf16:1>\n"), std::string::npos) << t["parameters"];
  const auto manifest = read_manifest(dir / "out");
  ASSERT_EQ(manifest.size(), 1u);
  EXPECT_EQ(manifest.at(0)["scheduler"], t["scheduler"]);
  EXPECT_EQ(manifest.at(0)["loras"][0]["sha256"], sha256_file(lora_file("comfy_bf16.safetensors")));

  // The same LoRA with the model's scheduler is another image: refused before any weight is read.
  auto other = test::run(case_cmd(job, dir / "out", "--lora " + lora_file("comfy_bf16.safetensors")));
  EXPECT_EQ(other.status, 2) << other.output;
  EXPECT_NE(other.output.find(name + " (scheduler FlowMatchEulerDiscrete("), std::string::npos) << other.output;
  EXPECT_EQ(other.output.find("loaded"), std::string::npos) << other.output;
}

// Golden case 6: two LoRAs of two formats at strengths 0.7 and 1 with true CFG; their order on
// the command line changes nothing, leaving one out is another setting.
TEST(GenerateLora, TwoLorasMakeDiffusersImageInEitherOrder) {
  h5::File f = h5::File::open_read(test::golden("lora.h5"));
  const h5::Group g = f.root().open_group("cases").open_group("06");
  ASSERT_EQ(g.attr_string("lora_files"), "[\"kohya.safetensors\", \"comfy_bf16.safetensors\"]");
  ASSERT_EQ(g.attr_string("scheduler"), "model");
  const ImageJob job = test::golden_pipeline_job(g);
  ASSERT_TRUE(job.true_cfg);
  const std::string kohya = "--lora " + lora_file("kohya.safetensors") + ":0.7",
                    comfy = "--lora " + lora_file("comfy_bf16.safetensors");
  TempDir dir;
  const PngImage png = generate_like_diffusers(g, dir / "out", kohya + " " + comfy);
  ASSERT_FALSE(png.pixels.empty());
  auto t = text_of(png);
  EXPECT_NE(t["parameters"].find("hello world <lora:kohya:0.7> <lora:comfy_bf16:1>\n"), std::string::npos)
      << t["parameters"];
  EXPECT_NE(t["parameters"].find("Lora hashes: \"kohya: " + sha256_file(lora_file("kohya.safetensors")).substr(0, 10)),
            std::string::npos)
      << t["parameters"];
  const auto loras = nlohmann::json::parse(t["loras"]);
  ASSERT_EQ(loras.size(), 2u);
  EXPECT_EQ(loras[0]["file"], "kohya.safetensors");
  EXPECT_EQ(loras[0]["strength"], 0.7);
  EXPECT_EQ(loras[1]["strength"], 1.0);

  auto swapped = test::run(case_cmd(job, dir / "out", comfy + " " + kohya));
  EXPECT_EQ(swapped.status, 0) << swapped.output;
  EXPECT_NE(swapped.output.find("0 done, 1 skipped"), std::string::npos) << swapped.output;
  auto one = test::run(case_cmd(job, dir / "out", kohya));
  EXPECT_EQ(one.status, 2) << one.output;
  EXPECT_NE(one.output.find("(loras [kohya.safetensors 0.7, comfy_bf16.safetensors 1], now [kohya.safetensors 0.7])"),
            std::string::npos)
      << one.output;
  auto stronger = test::run(case_cmd(job, dir / "out", "--lora " + lora_file("kohya.safetensors") + ":0.8 " + comfy));
  EXPECT_EQ(stronger.status, 2) << stronger.output;
}

TEST(GenerateLora, BadLorasAndSchedulersAreInputErrors) {
  TempDir dir;
  const std::string base = fmt::format("{} generate --weights {} --out {} --prompt x --width 64 --height 64 --steps 2 ",
                                       test::exe(), test::golden_weights(), dir / "out");
  struct Bad {
    std::string args, message;
  };
  for (const Bad& b : std::vector<Bad>{
           {"--lora " + lora_file("kohya.safetensors") + ":strong", "strength 'strong' is not a number"},
           {"--lora " + (dir / "none.safetensors"), "none.safetensors: no such file"},
           {"--lora " + test::golden("tiny-pipeline/vae/diffusion_pytorch_model.safetensors"), "not a LoRA of any format"},
           {"--scheduler fast", "--scheduler 'fast' (expected model"},
           {"--scheduler-config " + (dir / "none.json"), "none.json: no such file"},
           {"--scheduler lightning --scheduler-config " + lora_file("kohya.safetensors"), "give one of them"},
       }) {
    auto r = test::run(base + b.args);
    EXPECT_EQ(r.status, 2) << b.args << ": " << r.output;
    EXPECT_NE(r.output.find(b.message), std::string::npos) << b.args << ": " << r.output;
    EXPECT_EQ(r.output.find("loaded"), std::string::npos) << "refused before any weight is read: " << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "out/manifest.jsonl"));
}
