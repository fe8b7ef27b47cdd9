// LoRAs and custom schedulers against diffusers: the tiny pipeline with the LoRA files of
// tests/data/golden/lora (each format diffusers 0.42.1 reads, through load_lora_weights +
// set_adapters) reproduces diffusers' latents (NMSE <= 1e-10) and pixels (within 1, >= 99.9 %
// equal); every scheduler config, Lightning's included, gives diffusers' sigmas bit for bit; and
// every bad LoRA is a clear error naming the file and the key.
#include <gtest/gtest.h>

#include <fmt/ranges.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/sha256.h"
#include "core/timer.h"
#include "cpu/cpu_backend.h"
#include "golden.h"
#include "io/h5.h"
#include "io/safetensors.h"
#include "model/lora.h"
#include "model/lora_merge.h"
#include "pipeline/denoiser_setup.h"
#include "pipeline/qwen_image_pipeline.h"

using namespace ditbatch;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string lora_file(const std::string& name) { return test::golden("lora/" + name); }

TransformerConfig tiny_transformer_config() {
  const WeightStore weights = WeightStore::open(test::golden_weights());
  return TransformerConfig::from(weights.component("transformer").config());
}

bool same_bits(float a, float b) { return f32_bits(a) == f32_bits(b); }

struct LoraCase {
  ImageJob job;
  std::vector<LoraRequest> loras;
  std::string scheduler;
};

LoraCase read_case(const h5::Group& g) {
  LoraCase c;
  c.job = test::golden_pipeline_job(g);
  const auto files = nlohmann::json::parse(g.attr_string("lora_files"));
  const std::vector<double> strengths = g.attr_doubles("lora_strengths");
  for (size_t i = 0; i < files.size(); ++i) c.loras.push_back({lora_file(files[i]), strengths[i]});
  c.scheduler = g.attr_string("scheduler");
  return c;
}

// The case's image through the pipeline as `generate` runs it: LoRAs and scheduler set, the
// conditioning computed while loading (unless per_step), then one image.
GeneratedImage run_case(const LoraCase& c, const std::vector<LoraRequest>& loras, bool per_step = false) {
  CpuBackend be;
  Log log = Log::quiet();
  WeightStore weights = WeightStore::open(test::golden_weights());
  QwenImagePipeline pipeline(be, weights, log);
  pipeline.use_scheduler(resolve_scheduler(pipeline.model_scheduler_config(), c.scheduler, ""));
  pipeline.use_loras(LoraSet::open(loras, QwenImageTransformer::lora_targets(TransformerConfig::from(weights.component("transformer").config()))));
  if (per_step)
    pipeline.load_denoiser();
  else
    pipeline.load_denoiser(std::vector<ImageJob>{c.job});
  PromptEmbedding prompt = pipeline.encode_prompt(c.job.prompt);
  std::optional<PromptEmbedding> negative;
  if (c.job.true_cfg) negative = pipeline.encode_prompt(c.job.negative_prompt);
  StageTimes times;
  GeneratedImage image = pipeline.generate(c.job, prompt, negative ? &*negative : nullptr, nullptr, times);
  EXPECT_TRUE(image.ok) << image.error;
  return image;
}

h5::Group golden_case(const h5::File& f, int n) {
  return f.root().open_group("cases").open_group(fmt::format("{:02d}", n));
}

}  // namespace

class LoraGolden : public ::testing::TestWithParam<int> {};

TEST_P(LoraGolden, MatchesDiffusers) {
  h5::File f = h5::File::open_read(test::golden("lora.h5"));
  const h5::Group g = golden_case(f, GetParam());
  const LoraCase c = read_case(g);
  SCOPED_TRACE(fmt::format("{} LoRA(s), first {}, scheduler {}, {} steps, cfg {}, {}x{}", c.loras.size(),
                           c.loras[0].path, c.scheduler, c.job.steps, c.job.true_cfg, c.job.width, c.job.height));
  // The schedule first: exact.
  const WeightStore weights = WeightStore::open(test::golden_weights());
  const SchedulerConfig scheduler = resolve_scheduler(
      SchedulerConfig::from(weights.component("scheduler").config()), c.scheduler, "");
  const Schedule schedule = make_schedule(scheduler, static_cast<int>(c.job.steps), c.job.grid_h() * c.job.grid_w());
  const Tensor sigmas = g.read_tensor("sigmas");
  ASSERT_EQ(static_cast<int64_t>(schedule.sigmas.size()), sigmas.numel());
  for (int64_t i = 0; i < sigmas.numel(); ++i)
    EXPECT_TRUE(same_bits(schedule.sigmas[static_cast<size_t>(i)], sigmas.data<float>()[i])) << "sigma " << i;

  const GeneratedImage image = run_case(c, c.loras);
  ASSERT_TRUE(image.ok);
  const Tensor expected = test::squeeze0(g.read_tensor("final_latents"));
  EXPECT_LE(test::nmse(image.latents, expected), 1e-10);
  // diffusers' run without the LoRAs is far from this one: the match above is the LoRAs'.
  EXPECT_GT(test::nmse(image.latents, test::squeeze0(g.read_tensor("final_latents_without_lora"))), 1e-4);
  const Tensor expected_u8 = g.read_tensor("image_uint8");
  ASSERT_EQ(static_cast<int64_t>(image.pixels.size()), expected_u8.numel());
  const test::RgbAgreement agreement = test::rgb_agreement(image.pixels.data(), expected_u8.numel(), expected_u8);
  EXPECT_LE(agreement.max_diff, 1);
  EXPECT_GE(agreement.equal_fraction, 0.999);
}

INSTANTIATE_TEST_SUITE_P(AllCases, LoraGolden, ::testing::Range(0, 9));

TEST(LoraGoldenFile, CoversEveryFormatStrengthAndLightning) {
  h5::File f = h5::File::open_read(test::golden("lora.h5"));
  std::set<std::string> formats;
  bool two_at_once = false, strength_07 = false, lightning_8_no_cfg = false, top_level_and_mod = false;
  for (const std::string& name : f.root().open_group("cases").members()) {
    const LoraCase c = read_case(f.root().open_group("cases").open_group(name));
    const LoraSet set = LoraSet::open(c.loras, QwenImageTransformer::lora_targets(tiny_transformer_config()));
    for (const LoraFile& file : set.files()) formats.insert(file.formats);
    two_at_once |= c.loras.size() == 2;
    for (const LoraRequest& r : c.loras) strength_07 |= r.strength == 0.7;
    lightning_8_no_cfg |= c.scheduler == "lightning" && c.job.steps == 8 && !c.job.true_cfg;
    top_level_and_mod |= set.patches().count("img_in") && set.patches().count("transformer_blocks.0.img_mod.1") &&
                         set.patches().count("time_text_embed.timestep_embedder.linear_1");
  }
  EXPECT_TRUE(two_at_once && strength_07 && lightning_8_no_cfg && top_level_and_mod);
  EXPECT_TRUE(formats.count("LoraConfig metadata, transformer. lora_A/lora_B")) << fmt::format("{}", fmt::join(formats, " | "));
  EXPECT_TRUE(formats.count("no prefix lora_A/lora_B"));
  EXPECT_TRUE(formats.count("lora_unet_ (Kohya) lora_down/lora_up"));
  EXPECT_TRUE(formats.count("diffusion_model. lora_down/lora_up"));
  EXPECT_TRUE(formats.count("diffusion_model. lora_A/lora_B, no prefix lora_A/lora_B"));
}

// Every scheduler_config.json of the golden (partial ones take diffusers' defaults) gives
// diffusers' sigmas, timesteps and mu bit for bit; Lightning's built-in settings are the docs'.
TEST(LoraGolden, SchedulerConfigsAreBitExact) {
  h5::File f = h5::File::open_read(test::golden("lora.h5"));
  const h5::Group schedules = f.root().open_group("schedules");
  const WeightStore weights = WeightStore::open(test::golden_weights());
  const SchedulerConfig model = SchedulerConfig::from(weights.component("scheduler").config());
  int checked = 0;
  for (const std::string& name : schedules.members()) {
    const h5::Group sg = schedules.open_group(name);
    TempDir dir;
    test::write_text(dir / "scheduler_config.json", sg.attr_string("config"));
    std::vector<SchedulerConfig> configs = {resolve_scheduler(model, "model", dir / "scheduler_config.json")};
    if (name == "lightning") {
      configs.push_back(resolve_scheduler(model, "lightning", ""));
      EXPECT_EQ(configs[0].describe(), configs[1].describe());
    }
    for (const SchedulerConfig& config : configs)
      for (const std::string& steps_name : sg.members())
        for (const std::string& seq_name : sg.open_group(steps_name).members()) {
          const h5::Group g = sg.open_group(steps_name).open_group(seq_name);
          const int steps = std::stoi(steps_name.substr(6));
          const int64_t seq = std::stoll(seq_name.substr(4));
          const Schedule s = make_schedule(config, steps, seq);
          SCOPED_TRACE(fmt::format("{}: {} steps, S {}", name, steps, seq));
          EXPECT_EQ(s.mu, g.attr_double("mu"));
          const Tensor sigmas = g.read_tensor("sigmas"), timesteps = g.read_tensor("timesteps");
          ASSERT_EQ(static_cast<int64_t>(s.sigmas.size()), sigmas.numel());
          for (int64_t i = 0; i < sigmas.numel(); ++i)
            EXPECT_TRUE(same_bits(s.sigmas[static_cast<size_t>(i)], sigmas.data<float>()[i])) << "sigma " << i;
          for (int64_t i = 0; i < timesteps.numel(); ++i)
            EXPECT_TRUE(same_bits(s.timesteps[static_cast<size_t>(i)], timesteps.data<float>()[i])) << "timestep " << i;
          ++checked;
        }
  }
  EXPECT_EQ(checked, 6 * 25);  // 5 configs (Lightning twice) x 5 step counts x 5 sizes
}

TEST(LoraMerge, DeltaIsTheScaledProductOfTheFactors) {
  const int64_t out = 37, in = 29, rank = 5;
  Tensor w = test::random_tensor({out, in}, 1), up = test::random_tensor({out, rank}, 2), down = test::random_tensor({rank, in}, 3);
  Tensor merged = w.clone();
  add_lora_delta(merged, up, down, -0.35);
  double worst = 0;
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      double d = 0;
      for (int64_t r = 0; r < rank; ++r)
        d += static_cast<double>(up.data<float>()[o * rank + r]) * down.data<float>()[r * in + i];
      const double want = w.data<float>()[o * in + i] + -0.35 * d;
      worst = std::max(worst, std::abs(merged.data<float>()[o * in + i] - want));
    }
  EXPECT_LT(worst, 1e-5);
  EXPECT_GT(test::max_abs_diff(merged, w), 0.1);
}

// The order of --lora options changes no bit (the set merges in one order), and the modulation
// LoRA (img_mod, txt_mod, the time embedder) is in the conditioning computed at load exactly as in
// the one computed per step.
TEST(LoraMerge, OrderAndConditioningAtLoadChangeNoBit) {
  h5::File f = h5::File::open_read(test::golden("lora.h5"));
  const LoraCase two = read_case(golden_case(f, 6));
  ASSERT_EQ(two.loras.size(), 2u);
  const GeneratedImage a = run_case(two, two.loras);
  const GeneratedImage b = run_case(two, {two.loras[1], two.loras[0]});
  const GeneratedImage per_step = run_case(two, two.loras, true);
  ASSERT_TRUE(a.ok && b.ok && per_step.ok);
  EXPECT_EQ(std::memcmp(a.latents.raw(), b.latents.raw(), a.latents.nbytes()), 0);
  EXPECT_EQ(std::memcmp(a.latents.raw(), per_step.latents.raw(), a.latents.nbytes()), 0);
  EXPECT_EQ(a.pixels, per_step.pixels);
}

namespace {

// The tensors of a safetensors file as StTensors (to write variants of the golden LoRAs).
std::vector<test::StTensor> tensors_of(const std::string& path) {
  auto file = SafetensorsFile::open(path);
  std::vector<test::StTensor> out;
  for (const SafetensorsEntry& e : file->entries()) {
    const char* dtype = e.dtype == DType::F32 ? "F32" : e.dtype == DType::BF16 ? "BF16" : "F16";
    out.push_back({e.name, dtype, e.shape, std::string(static_cast<const char*>(file->data(e)), e.end - e.begin)});
  }
  return out;
}

std::string lora_error(const std::vector<LoraRequest>& requests) {
  return test::input_error_of([&] { LoraSet::open(requests, QwenImageTransformer::lora_targets(tiny_transformer_config())); });
}

void expect_has(const std::string& message, const std::vector<std::string>& parts) {
  for (const std::string& p : parts) EXPECT_NE(message.find(p), std::string::npos) << "'" << p << "' not in: " << message;
}

}  // namespace

// diffusers 0.42.1 refuses diffusers-named keys with the transformer. prefix and an .alpha (its
// converter prefixes them a second time); ditbatch reads them as the same file without the prefix,
// which diffusers reads (golden case 02).
TEST(LoraFormats, TransformerPrefixWithAlphaIsTheUnprefixedFile) {
  TempDir dir;
  std::vector<test::StTensor> tensors = tensors_of(lora_file("peft_alpha.safetensors"));
  for (auto& t : tensors) t.name = "transformer." + t.name;
  test::write_text(dir / "prefixed.safetensors", test::safetensors_bytes(tensors));
  const LoraSet prefixed = LoraSet::open({{dir / "prefixed.safetensors", 1.0}}, QwenImageTransformer::lora_targets(tiny_transformer_config()));
  const LoraSet plain = LoraSet::open({{lora_file("peft_alpha.safetensors"), 1.0}}, QwenImageTransformer::lora_targets(tiny_transformer_config()));
  ASSERT_EQ(prefixed.patches().size(), plain.patches().size());
  for (const auto& [module, patches] : plain.patches()) {
    ASSERT_TRUE(prefixed.patches().count(module)) << module;
    EXPECT_EQ(prefixed.patches().at(module)[0].scale, patches[0].scale) << module;
    EXPECT_EQ(patches[0].scale, 3.0 / 4.0) << module;  // alpha 3, rank 4
  }
  h5::File f = h5::File::open_read(test::golden("lora.h5"));
  const h5::Group g = golden_case(f, 2);
  LoraCase c = read_case(g);
  const GeneratedImage image = run_case(c, {{dir / "prefixed.safetensors", 1.0}});
  EXPECT_LE(test::nmse(image.latents, test::squeeze0(g.read_tensor("final_latents"))), 1e-10);
}

TEST(LoraInput, StrengthMustBeANumber) {
  EXPECT_EQ(parse_lora_argument("a.safetensors").strength, 1.0);
  EXPECT_EQ(parse_lora_argument("a.safetensors:0.7").strength, 0.7);
  EXPECT_EQ(parse_lora_argument("dir/a.safetensors:-0.5").path, "dir/a.safetensors");
  expect_has(test::input_error_of([] { parse_lora_argument("style.safetensors:strong"); }),
             {"--lora style.safetensors:strong", "strength 'strong' is not a number"});
  expect_has(test::input_error_of([] { parse_lora_argument("style.safetensors:"); }), {"strength '' is not a number"});
  expect_has(test::input_error_of([] { parse_lora_argument("style.safetensors:nan"); }), {"strength 'nan'"});
}

TEST(LoraInput, MissingAndTruncatedFiles) {
  expect_has(lora_error({{"/nonexistent/style.safetensors", 1.0}}), {"/nonexistent/style.safetensors", "no such file"});
  TempDir dir;
  const std::string whole = test::read_text(lora_file("kohya.safetensors"));
  test::write_text(dir / "cut.safetensors", whole.substr(0, whole.size() / 2));
  expect_has(lora_error({{dir / "cut.safetensors", 1.0}}), {dir / "cut.safetensors", "truncated"});
}

TEST(LoraInput, UnknownFormats) {
  TempDir dir;
  const std::string a = test::f32_bytes(test::random_floats(64 * 4, 1));
  // A model checkpoint, not a LoRA: no key of any LoRA format.
  test::write_text(dir / "checkpoint.safetensors",
                   test::safetensors_bytes({{"model.diffusion_model.input_blocks.0.weight", "F32", {4, 64}, a}}));
  expect_has(lora_error({{dir / "checkpoint.safetensors", 1.0}}),
             {dir / "checkpoint.safetensors", "not a LoRA of any format", "model.diffusion_model.input_blocks.0.weight"});
  // A LoRA with one key of another kind of adapter (LoKr).
  std::vector<test::StTensor> tensors = tensors_of(lora_file("comfy_bf16.safetensors"));
  tensors.push_back({"diffusion_model.transformer_blocks.0.attn.to_q.lokr_w1", "F32", {4, 64}, a});
  test::write_text(dir / "lokr.safetensors", test::safetensors_bytes(tensors));
  expect_has(lora_error({{dir / "lokr.safetensors", 1.0}}),
             {dir / "lokr.safetensors", "'diffusion_model.transformer_blocks.0.attn.to_q.lokr_w1' is not a LoRA factor"});
  // DoRA's magnitudes: refused, not dropped.
  tensors.pop_back();
  tensors.push_back({"diffusion_model.transformer_blocks.0.attn.to_q.dora_scale", "F32", {1, 64}, a.substr(0, 256)});
  test::write_text(dir / "dora.safetensors", test::safetensors_bytes(tensors));
  expect_has(lora_error({{dir / "dora.safetensors", 1.0}}), {dir / "dora.safetensors", "dora_scale", "DoRA"});
}

TEST(LoraInput, ALoraForAnotherModel) {
  TempDir dir;
  const std::string a = test::f32_bytes(test::random_floats(4 * 64, 1)), b = test::f32_bytes(test::random_floats(64 * 4, 2));
  // Flux's names (single_transformer_blocks) and an SDXL Kohya file: LoRA keys, no module of ours.
  test::write_text(dir / "flux.safetensors",
                   test::safetensors_bytes({{"transformer.single_transformer_blocks.0.attn.to_q.lora_A.weight", "F32", {4, 64}, a},
                                            {"transformer.single_transformer_blocks.0.attn.to_q.lora_B.weight", "F32", {64, 4}, b}}));
  expect_has(lora_error({{dir / "flux.safetensors", 1.0}}),
             {dir / "flux.safetensors", "none of its 2 LoRA keys", "another model",
              "transformer.single_transformer_blocks.0.attn.to_q.lora_A.weight"});
  test::write_text(dir / "sdxl.safetensors",
                   test::safetensors_bytes({{"lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight", "F32", {4, 64}, a},
                                            {"lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight", "F32", {64, 4}, b}}));
  expect_has(lora_error({{dir / "sdxl.safetensors", 1.0}}),
             {dir / "sdxl.safetensors", "another model", "lora_unet_down_blocks_0_attentions_0_proj_in"});
}

TEST(LoraInput, AModuleTheModelLacks) {
  TempDir dir;
  std::vector<test::StTensor> tensors = tensors_of(lora_file("peft_metadata.safetensors"));
  const std::string a = test::f32_bytes(test::random_floats(4 * 64, 1)), b = test::f32_bytes(test::random_floats(64 * 4, 2));
  tensors.push_back({"transformer.transformer_blocks.7.attn.to_q.lora_A.weight", "F32", {4, 64}, a});
  tensors.push_back({"transformer.transformer_blocks.7.attn.to_q.lora_B.weight", "F32", {64, 4}, b});
  test::write_text(dir / "sixty_blocks.safetensors", test::safetensors_bytes(tensors));
  expect_has(lora_error({{dir / "sixty_blocks.safetensors", 1.0}}),
             {dir / "sixty_blocks.safetensors", "transformer.transformer_blocks.7.attn.to_q.lora_", "2 blocks"});
  tensors.resize(tensors.size() - 2);
  tensors.push_back({"transformer.transformer_blocks.0.attn.to_z.lora_A.weight", "F32", {4, 64}, a});
  tensors.push_back({"transformer.transformer_blocks.0.attn.to_z.lora_B.weight", "F32", {64, 4}, b});
  test::write_text(dir / "to_z.safetensors", test::safetensors_bytes(tensors));
  expect_has(lora_error({{dir / "to_z.safetensors", 1.0}}),
             {dir / "to_z.safetensors", "transformer.transformer_blocks.0.attn.to_z.lora_", "closest linears"});
}

TEST(LoraInput, AShapeThatDoesNotFitTheModule) {
  TempDir dir;
  std::vector<test::StTensor> tensors = tensors_of(lora_file("kohya.safetensors"));
  for (auto& t : tensors)
    if (t.name == "lora_unet_transformer_blocks_0_attn_to_q.lora_down.weight") {
      t.shape = {8, 32};  // the same 256 values as [rank 8, in 32]: the module's in is 64
    }
  test::write_text(dir / "shape.safetensors", test::safetensors_bytes(tensors));
  expect_has(lora_error({{dir / "shape.safetensors", 1.0}}),
             {dir / "shape.safetensors", "'lora_unet_transformer_blocks_0_attn_to_q.lora_down.weight' is [8, 32]",
              "transformer_blocks.0.attn.to_q", "[rank, 64]"});
  // lora_down without its lora_up
  tensors = tensors_of(lora_file("kohya.safetensors"));
  std::erase_if(tensors, [](const auto& t) { return t.name == "lora_unet_img_in.lora_up.weight"; });
  test::write_text(dir / "half.safetensors", test::safetensors_bytes(tensors));
  expect_has(lora_error({{dir / "half.safetensors", 1.0}}),
             {dir / "half.safetensors", "'lora_unet_img_in.lora_down.weight' has no matching lora_up"});
}

TEST(LoraInput, ANonFiniteValue) {
  TempDir dir;
  std::vector<test::StTensor> tensors = tensors_of(lora_file("comfy_bf16.safetensors"));
  for (auto& t : tensors)
    if (t.name == "diffusion_model.transformer_blocks.1.txt_mlp.net.2.lora_up.weight") {
      const uint16_t nan = 0x7fc0;  // bf16 NaN
      std::memcpy(t.bytes.data() + 2 * 10, &nan, 2);
    }
  test::write_text(dir / "nan.safetensors", test::safetensors_bytes(tensors));
  expect_has(lora_error({{dir / "nan.safetensors", 1.0}}),
             {dir / "nan.safetensors", "'diffusion_model.transformer_blocks.1.txt_mlp.net.2.lora_up.weight' holds NaN",
              "element 10"});
}

TEST(LoraSet, TravelsToOtherRanksAsJson) {
  const LoraSet set = LoraSet::open({{lora_file("kohya.safetensors"), 0.7}, {lora_file("mixed_f16.safetensors"), -0.5}},
                                    QwenImageTransformer::lora_targets(tiny_transformer_config()));
  const LoraSet back = LoraSet::from_json(set.to_json());
  EXPECT_EQ(back.to_json(), set.to_json());
  EXPECT_EQ(back.provenance(), set.provenance());
  EXPECT_EQ(set.files()[0].sha256, sha256_file(lora_file("kohya.safetensors")));
  EXPECT_EQ(set.files()[1].name, "mixed_f16.safetensors");
  // Kohya alpha 3: rank 4 in the blocks (0.75), rank 2 on the top-level linears (1.5), times 0.7.
  EXPECT_DOUBLE_EQ(set.patches().at("img_in")[0].scale, 0.7 * 1.5);
  // img_mod of block 1: both files (mixed_f16: alpha 2, rank 4, -0.5)
  const auto& mod = set.patches().at("transformer_blocks.1.img_mod.1");
  ASSERT_EQ(mod.size(), 2u);
  const LoraPatch& kohya = mod[0].file == 0 ? mod[0] : mod[1];
  const LoraPatch& mixed = mod[0].file == 0 ? mod[1] : mod[0];
  EXPECT_DOUBLE_EQ(kohya.scale, 0.7 * 0.75);
  EXPECT_EQ(kohya.rank, 4);
  EXPECT_DOUBLE_EQ(mixed.scale, -0.5 * 0.5);
  EXPECT_EQ(mixed.down_key, "transformer_blocks.1.img_mod.1.lora_A.default.weight");  // the key as stored
}

namespace {

// The golden PEFT file with its LoraConfig edited by `edit` (the metadata's JSON, keys in order).
std::string peft_variant(const TempDir& dir, const std::string& name,
                         const std::function<void(nlohmann::ordered_json&)>& edit) {
  const std::string source = lora_file("peft_metadata.safetensors");
  const std::string bytes = test::read_text(source);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  nlohmann::json metadata = nlohmann::json::parse(bytes.substr(8, n))["__metadata__"];
  auto config = nlohmann::ordered_json::parse(metadata["lora_adapter_metadata"].get<std::string>());
  edit(config);
  metadata["lora_adapter_metadata"] = config.dump();
  test::write_text(dir / name, test::safetensors_bytes(tensors_of(source), metadata));
  return dir / name;
}

// module -> the (rank, scale) of each of its patches, as the merge will apply them.
std::map<std::string, std::vector<std::pair<int64_t, double>>> patch_scales(const LoraSet& set) {
  std::map<std::string, std::vector<std::pair<int64_t, double>>> out;
  for (const auto& [module, list] : set.patches())
    for (const LoraPatch& p : list) out[module].emplace_back(p.rank, p.scale);
  return out;
}

}  // namespace

// PEFT's rank_pattern / alpha_pattern / target_modules are regular expressions from the file:
// one that backtracks forever under std::regex (`(.*)*...Z` on a module name) once hung the
// load, deaf to SIGTERM. They are matched in linear time (RE2): the load finishes with the same
// patches as the file without them; a pattern that is not one, or is over 1 KB, is refused by name.
TEST(LoraInput, PathologicalPatternsAreMatchedInBoundedTime) {
  TempDir dir;
  const LoraTargets targets = QwenImageTransformer::lora_targets(tiny_transformer_config());
  const LoraSet plain = LoraSet::open({{lora_file("peft_metadata.safetensors"), 1.0}}, targets);
  const std::string hostile = peft_variant(dir, "hostile.safetensors", [](nlohmann::ordered_json& c) {
    c["transformer.alpha_pattern"]["(.*)*(.*)*(.*)*(.*)*(.*)*(.*)*Z"] = 1000;  // after the real key: never first
    c["transformer.rank_pattern"]["((a|b|c|d|e|f|g|h|i|k|l|m|n|o|p|q|r|s|t|_|[.0-9])+)+Z"] = 64;
  });
  const Stopwatch watch;
  const LoraSet loaded = LoraSet::open({{hostile, 1.0}}, targets);
  EXPECT_EQ(patch_scales(loaded), patch_scales(plain));
  EXPECT_FALSE(patch_scales(plain).empty());
  // The real alpha_pattern key still applies where PEFT applies it (scale alpha / r = 2 / 4).
  ASSERT_TRUE(patch_scales(plain).count("transformer_blocks.1.attn.to_q"));
  EXPECT_EQ(patch_scales(plain).at("transformer_blocks.1.attn.to_q").at(0).second, 0.5);
  EXPECT_LT(watch.seconds(), 60.0) << "the patterns were not matched in bounded time";

  const std::string unbalanced = peft_variant(dir, "unbalanced.safetensors", [](nlohmann::ordered_json& c) {
    c["transformer.rank_pattern"]["to_q("] = 8;
  });
  expect_has(lora_error({{unbalanced, 1.0}}),
             {unbalanced, "has a rank_pattern key", "which is not a regular expression ditbatch can match", "missing )"});
  const std::string deep = peft_variant(dir, "deep.safetensors", [](nlohmann::ordered_json& c) {
    c["transformer.target_modules"] = std::string(30000, '(') + "to_q" + std::string(30000, ')');
  });
  expect_has(lora_error({{deep, 1.0}}), {deep, "target_modules", "a pattern of 60004 bytes (at most 1024)"});
}

// LoRA files that pass as files but cannot be what they say: a rank that is no rank, a file of
// no tensors, one file twice, a folder; factors that overflow when merged are said at load,
// naming the LoRA, not after denoising as NaN images.
TEST(LoraInput, RanksFilesAndMergesThatCannotBe) {
  TempDir dir;
  const LoraTargets targets = QwenImageTransformer::lora_targets(tiny_transformer_config());
  for (const auto& r_case : std::vector<std::pair<nlohmann::ordered_json, std::string>>{
           {3.5, "r = 3.5"}, {1e300, "r = 1e+300"}, {0, "r = 0"}}) {
    const nlohmann::ordered_json r = r_case.first;  // a copy: lambdas may not capture structured bindings (clang 14)
    const std::string& shown = r_case.second;
    const std::string file = peft_variant(dir, "r.safetensors", [&](nlohmann::ordered_json& c) { c["transformer.r"] = r; });
    expect_has(lora_error({{file, 1.0}}), {file, shown, "expected the rank: a whole number, 1..65536"});
  }
  test::write_text(dir / "empty.safetensors", test::safetensors_bytes({}));
  expect_has(lora_error({{dir / "empty.safetensors", 1.0}}), {dir / "empty.safetensors", "holds no tensors: not a LoRA"});
  fs::copy_file(lora_file("kohya.safetensors"), dir / "copy.safetensors");
  expect_has(lora_error({{lora_file("kohya.safetensors"), 0.5}, {dir / "copy.safetensors", 0.5}}),
             {"--lora " + (dir / "copy.safetensors"), "the same LoRA as --lora " + lora_file("kohya.safetensors"),
              "give it once, with the strengths added"});
  fs::create_directories(dir / "folder.safetensors");
  expect_has(lora_error({{dir / "folder.safetensors", 1.0}}), {dir / "folder.safetensors", "is a folder, not a file"});

  // Factors of 3e38 (finite, and so accepted by the file's checks): the merge overflows.
  std::vector<test::StTensor> huge = tensors_of(lora_file("peft_alpha.safetensors"));
  for (test::StTensor& t : huge) {
    int64_t numel = 1;
    for (const int64_t d : t.shape) numel *= d;
    t.dtype = "F32";
    t.bytes = test::f32_bytes(std::vector<float>(static_cast<size_t>(numel), 3e38f));
  }
  test::write_text(dir / "huge.safetensors", test::safetensors_bytes(huge));
  const auto r = test::run(fmt::format("{} generate --weights {} --prompt x --width 32 --height 32 --steps 2 --lora {} "
                                       "--out {}",
                                       test::exe(), test::golden_weights(), dir / "huge.safetensors", dir / "out"));
  EXPECT_EQ(r.status, 2) << r.output;
  expect_has(r.output, {"merging " + (dir / "huge.safetensors") + " (strength 1", " at element ",
                        "too large for float32"});
  EXPECT_FALSE(fs::exists(dir / "out/000000-x.png"));
}
