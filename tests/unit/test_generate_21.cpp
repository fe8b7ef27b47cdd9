// `ditbatch generate` with a Qwen-Image-2.1 weight file, end to end through the CLI: the tiny
// QwenImage21Pipeline folder diffusers built (tests/data/golden/tiny-pipeline-21) converted, then
// the cases of pipeline_21.h5 (CFG on and off, non-square, a non-ASCII prompt, a seed above 2^32,
// Turbo's sigma grid) made as RGBA PNGs and latents files equal to diffusers' outputs; the
// family's defaults, and the options it does not take refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "golden.h"
#include "io/h5.h"
#include "io/png_io.h"
#include "io/safetensors.h"
#include "test_util.h"

using namespace ditbatch;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

// A copy of the tiny 2.1 folder; Turbo's: its sigma grid in model_index.json and its scheduler
// config, as pipeline_21.h5 records them.
std::string tiny_folder(const TempDir& dir, bool turbo) {
  const std::string folder = dir / (turbo ? "turbo" : "base");
  fs::copy(test::golden("tiny-pipeline-21"), folder, fs::copy_options::recursive);
  if (turbo) {
    const h5::File golden = h5::File::open_read(test::golden("pipeline_21.h5"));
    nlohmann::json index = nlohmann::json::parse(test::read_text(folder + "/model_index.json"));
    index["sample_sigmas"] = golden.root().attr_doubles("turbo_sample_sigmas");
    test::write_text(folder + "/model_index.json", index.dump(2));
    nlohmann::json scheduler = nlohmann::json::parse(golden.root().attr_string("turbo_scheduler_config"));
    scheduler["_class_name"] = "FlowMatchEulerDiscreteScheduler";
    test::write_text(folder + "/scheduler/scheduler_config.json", scheduler.dump(2));
  }
  return folder;
}

std::string converted(const TempDir& dir, bool turbo) {
  const std::string h5 = dir / (turbo ? "turbo.h5" : "v21.h5");
  const auto r = test::run(fmt::format("{} convert --from {} --to {}", test::exe(), tiny_folder(dir, turbo), h5));
  EXPECT_EQ(r.status, 0) << r.output;
  return h5;
}

// The case as a prompt-file line: every setting its own, the file named by the case.
nlohmann::json line_of(const std::string& name, const h5::Group& g) {
  nlohmann::json line = {{"prompt", g.attr_string("prompt")},
                         {"negative_prompt", g.attr_string("negative_prompt")},
                         {"seed", static_cast<uint64_t>(g.attr_int("seed"))},
                         {"width", g.attr_int("width")},
                         {"height", g.attr_int("height")},
                         {"cfg", g.attr_double("true_cfg_scale")},
                         {"name", "case" + name}};
  if (!g.attr_int("turbo")) line["steps"] = g.attr_int("steps");
  if (!g.has_dataset("negative_prompt_embeds")) line["negative_prompt"] = nullptr;  // diffusers' None
  return line;
}

// The PNG against diffusers' RGBA bytes, the latents file against its latents.
void expect_as_diffusers(const std::string& out, const std::string& name, const h5::Group& g) {
  SCOPED_TRACE("case " + name);
  const PngImage png = read_png(out + "/case" + name + ".png");
  EXPECT_EQ(png.channels, 4);
  const Tensor expected = g.read_tensor("image_uint8");  // [H, W, 4]
  ASSERT_EQ(png.height, expected.dim(0));
  ASSERT_EQ(png.width, expected.dim(1));
  ASSERT_EQ(std::ssize(png.pixels), expected.numel());
  const test::RgbAgreement agreement = test::rgb_agreement(png.pixels.data(), expected.numel(), expected);
  EXPECT_LE(agreement.max_diff, 1);
  EXPECT_GE(agreement.equal_fraction, 0.999);
  const h5::File latents = h5::File::open_read(out + "/case" + name + ".latents.h5");
  const Tensor got = latents.root().read_tensor("latents");  // [1, S, 64]
  const Tensor want = g.read_tensor("latents");              // [S, 64]
  EXPECT_LE(test::nmse(got.view({want.dim(0), want.dim(1)}), want), 1e-9);
}

bool says(const std::string& output, const std::string& text) { return output.find(text) != std::string::npos; }

std::map<std::string, std::string> text_of(const PngImage& png) {
  return std::map<std::string, std::string>(png.text.begin(), png.text.end());
}

}  // namespace

TEST(Generate21, MakesDiffusersRgbaImagesFromTheConvertedFolder) {
  TempDir dir;
  const std::string weights = converted(dir, false);
  const h5::File golden = h5::File::open_read(test::golden("pipeline_21.h5"));
  const h5::Group cases = golden.root().open_group("cases");
  std::string lines;
  std::vector<std::string> names;
  for (const auto& name : cases.members())
    if (!cases.open_group(name).attr_int("turbo")) {
      lines += line_of(name, cases.open_group(name)).dump() + "\n";
      names.push_back(name);
    }
  ASSERT_EQ(names.size(), 2u);
  test::write_text(dir / "p.jsonl", lines);
  auto r = test::run(fmt::format("{} generate --weights {} --out {} --prompts {} --output-type latent", test::exe(),
                                 weights, dir / "out", dir / "p.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  for (const std::string& name : names) expect_as_diffusers(dir / "out", name, cases.open_group(name));

  // The settings in the PNG, with no prompt token limit (2.1 encodes the whole prompt).
  const auto text = text_of(read_png(dir / "out/case01.png"));
  EXPECT_EQ(text.at("cfg"), "2.5");
  EXPECT_EQ(text.at("seed"), "1099511627779");
  EXPECT_EQ(text.count("max_sequence_length"), 0u);
  EXPECT_NE(text.at("parameters").find("\nNegative prompt:  \nSteps: 2, Sampler: FlowMatchEulerDiscrete, CFG scale: "
                                       "2.5, Seed: 1099511627779, Size: 32x64"),
            std::string::npos)
      << text.at("parameters");

  // A rerun finds every image complete.
  r = test::run(fmt::format("{} generate --weights {} --out {} --prompts {} --output-type latent", test::exe(), weights,
                            dir / "out", dir / "p.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(says(r.output, "every image of this slice is complete")) << r.output;
}

// Turbo: the checkpoint's sample_sigmas decide the steps (8 here, none given) and its image is
// diffusers'; a step count other than the grid's is refused before any work.
TEST(Generate21, TurboRunsItsOwnSigmaGrid) {
  TempDir dir;
  const std::string weights = converted(dir, true);
  const h5::File golden = h5::File::open_read(test::golden("pipeline_21.h5"));
  const h5::Group g = golden.root().open_group("cases").open_group("02");
  ASSERT_EQ(g.attr_int("turbo"), 1);
  test::write_text(dir / "p.jsonl", line_of("02", g).dump() + "\n");
  auto r = test::run(fmt::format("{} generate --weights {} --out {} --prompts {} --output-type latent", test::exe(),
                                 weights, dir / "out", dir / "p.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  expect_as_diffusers(dir / "out", "02", g);
  EXPECT_EQ(text_of(read_png(dir / "out/case02.png")).at("steps"), "8");

  r = test::run(fmt::format("{} generate --weights {} --out {} --prompt a --steps 20", test::exe(), weights,
                            dir / "out2"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(says(r.output, "--steps: steps 20, but this Qwen-Image-2.1 checkpoint denoises over its own "
                                      "8 sample_sigmas"))
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "out2"));
}

// The family's defaults apply where nothing is given (40 steps, CFG off, sides floored to 32), and
// the options only Qwen-Image takes are refused, naming the option, the model and what to do.
TEST(Generate21, TheFamilysDefaultsAndOptionsItDoesNotTake) {
  TempDir dir;
  const std::string weights = converted(dir, false);
  auto r = test::run(fmt::format("{} generate --weights {} --out {} --prompt fox --width 80 --height 48", test::exe(),
                                 weights, dir / "out"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(says(r.output, "width 80 is not a multiple of 32; using 64")) << r.output;
  const auto text = text_of(read_png(dir / "out/000000-fox.png"));
  EXPECT_EQ(text.at("steps"), "40");
  EXPECT_EQ(text.at("cfg"), "1");
  EXPECT_EQ(text.at("size"), "64x32");

  // inspect says the family and its defaults.
  r = test::run(fmt::format("{} inspect {}", test::exe(), weights));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(says(r.output, "pipeline_class: QwenImage21Pipeline")) << r.output;
  EXPECT_TRUE(says(r.output, "generate's defaults (Qwen-Image-2.1): 1024x1024, 40 steps, CFG off")) << r.output;

  // --offload-text-encoder (every prompt encoded first, the encoder freed) makes the same bytes.
  test::write_text(dir / "p.txt", "fox\na lighthouse at dusk\n");
  for (const char* extra : {"", "--offload-text-encoder"}) {
    r = test::run(fmt::format("{} generate --weights {} --out {} --prompts {} --width 32 --height 64 --steps 3 --cfg 3 {}",
                              test::exe(), weights, dir / (*extra ? "offload" : "plain"), dir / "p.txt", extra));
    ASSERT_EQ(r.status, 0) << r.output;
  }
  EXPECT_TRUE(says(r.output, "encoded 3 prompts")) << r.output;  // two prompts and the negative " "
  for (const char* name : {"000000-fox.png", "000001-a-lighthouse-at-dusk.png"})
    EXPECT_EQ(test::read_text(dir / "offload/" + name), test::read_text(dir / "plain/" + name)) << name;

  for (const auto& [option, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"--max-sequence-length 256", "--max-sequence-length 256: Qwen-Image-2.1 (QwenImage21Pipeline) encodes the "
                                         "whole prompt and takes no limit; remove the option"},
           {"--scheduler lightning", "--scheduler lightning: Qwen-Image-2.1 (QwenImage21Pipeline) takes no preset; use "
                                     "--scheduler model"},
           {"--width 16", "--width: width 16 is out of range (32..8192 pixels for Qwen-Image-2.1)"}}) {
    r = test::run(fmt::format("{} generate --weights {} --out {} --prompt a {}", test::exe(), weights, dir / "bad",
                              option));
    EXPECT_EQ(r.status, 2) << option << "\n" << r.output;
    EXPECT_TRUE(says(r.output, message)) << option << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dir / "bad")) << option;
  }
}

// A LoRA of the 2.1 transformer in diffusers / PEFT keys merges as W + strength * alpha / rank *
// B A: its images are those of a folder whose weights were changed so by hand (in float64 here);
// a Qwen-Image module name is refused, naming it and the 2.1 transformer.
TEST(Generate21, ALoraInDiffusersKeysIsMergedIntoTheTransformer) {
  TempDir dir;
  const std::string base = tiny_folder(dir, false);
  const std::string dit_file = base + "/transformer/diffusion_pytorch_model.safetensors";
  const auto dit = SafetensorsFile::open(dit_file);
  // rank 2, alpha 1, strength 0.8: scale 0.4 on two linears of different shapes.
  const double scale = 0.8 * 1.0 / 2.0;
  const std::vector<std::string> modules = {"transformer_blocks.0.attn.to_q", "transformer_blocks.1.img_mlp.out"};
  std::vector<test::StTensor> lora, merged;
  std::map<std::string, Tensor> changed;
  uint32_t seed = 11;
  for (const std::string& module : modules) {
    const SafetensorsEntry* weight = nullptr;
    for (const SafetensorsEntry& e : dit->entries())
      if (e.name == module + ".weight") weight = &e;
    ASSERT_NE(weight, nullptr) << module;
    const int64_t out = weight->shape[0], in = weight->shape[1], rank = 2;
    const std::vector<float> down = test::random_floats(static_cast<size_t>(rank * in), seed++, 0.5f);
    const std::vector<float> up = test::random_floats(static_cast<size_t>(out * rank), seed++, 0.5f);
    lora.push_back({"transformer." + module + ".lora_A.weight", "F32", {rank, in}, test::f32_bytes(down)});
    lora.push_back({"transformer." + module + ".lora_B.weight", "F32", {out, rank}, test::f32_bytes(up)});
    lora.push_back({"transformer." + module + ".alpha", "F32", {}, test::f32_bytes({1.0f})});
    Tensor w = dit->tensor(*weight).to_f32();
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        double delta = 0;
        for (int64_t r = 0; r < rank; ++r)
          delta += static_cast<double>(up[static_cast<size_t>(o * rank + r)]) *
                   static_cast<double>(down[static_cast<size_t>(r * in + i)]);
        float& v = w.data<float>()[o * in + i];
        v = static_cast<float>(static_cast<double>(v) + scale * delta);
      }
    changed.emplace(weight->name, std::move(w));
  }
  for (const SafetensorsEntry& e : dit->entries()) {
    const Tensor t = changed.count(e.name) ? changed.at(e.name) : dit->tensor(e).to_f32();
    merged.push_back({e.name, "F32", e.shape, std::string(t.data<char>(), static_cast<size_t>(t.numel()) * 4)});
  }
  test::write_text(dir / "style.safetensors", test::safetensors_bytes(lora));
  const std::string by_hand = dir / "by-hand";
  fs::copy(base, by_hand, fs::copy_options::recursive);
  test::write_text(by_hand + "/transformer/diffusion_pytorch_model.safetensors", test::safetensors_bytes(merged));
  for (const auto& [folder, h5] : {std::pair{base, dir / "base.h5"}, std::pair{by_hand, dir / "merged.h5"}})
    ASSERT_EQ(test::run(fmt::format("{} convert --from {} --to {}", test::exe(), folder, h5)).status, 0) << folder;

  const std::string settings = "--prompt 'a red fox' --width 64 --height 32 --steps 3 --output-type latent";
  auto r = test::run(fmt::format("{} generate --weights {} --out {} {} --lora {}:0.8", test::exe(), dir / "base.h5",
                                 dir / "lora", settings, dir / "style.safetensors"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(says(r.output, "LoRA: 1 file(s) merged into 2 linears")) << r.output;
  for (const auto& [h5, out] : {std::pair{dir / "merged.h5", dir / "hand"}, std::pair{dir / "base.h5", dir / "plain"}}) {
    r = test::run(fmt::format("{} generate --weights {} --out {} {}", test::exe(), h5, out, settings));
    ASSERT_EQ(r.status, 0) << r.output;
  }
  auto latents = [&](const std::string& out) {
    return h5::File::open_read(out + "/000000-a-red-fox.latents.h5").root().read_tensor("latents");
  };
  EXPECT_LE(test::nmse(latents(dir / "lora"), latents(dir / "hand")), 1e-10);
  EXPECT_GT(test::nmse(latents(dir / "lora"), latents(dir / "plain")), 1e-6) << "the LoRA changed nothing";
  const PngImage with_lora = read_png(dir / "lora/000000-a-red-fox.png"), by_hand_png = read_png(dir / "hand/000000-a-red-fox.png");
  ASSERT_EQ(with_lora.pixels.size(), by_hand_png.pixels.size());
  int max_diff = 0;
  for (size_t i = 0; i < with_lora.pixels.size(); ++i)
    max_diff = std::max(max_diff, std::abs(int{with_lora.pixels[i]} - int{by_hand_png.pixels[i]}));
  EXPECT_LE(max_diff, 1);

  // A Qwen-Image LoRA (its text stream's modules) is not one of this model's.
  test::write_text(dir / "qwen.safetensors",
                   test::safetensors_bytes({{"transformer.transformer_blocks.0.attn.add_q_proj.lora_A.weight", "F32",
                                             {2, 64}, test::f32_bytes(std::vector<float>(128, 0.1f))},
                                            {"transformer.transformer_blocks.0.attn.add_q_proj.lora_B.weight", "F32",
                                             {64, 2}, test::f32_bytes(std::vector<float>(128, 0.1f))}}));
  r = test::run(fmt::format("{} generate --weights {} --out {} --prompt a --lora {}", test::exe(), dir / "base.h5",
                            dir / "bad", dir / "qwen.safetensors"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(says(r.output, "names a linear of this Qwen-Image-2.1 transformer (2 blocks, inner dim 32)")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "bad"));
}
