// The whole tiny QwenImage21Pipeline, text to image, on the CPU backend against diffusers
// (tools/golden, stage pipeline_21): the components of text_encoder_21.h5, transformer_21.h5 and
// vae_21.h5 (the weights the pipeline was built from), the tiny tokenizer, the 2.1 scheduler;
// CFG on and off, a Turbo sigma grid, non-square sizes, a non-ASCII prompt, a seed above 2^32.
// The prompt embeddings, the final latents and the RGBA bytes diffusers saved.
#include <gtest/gtest.h>

#include "cpu/cpu_backend.h"
#include "golden.h"
#include "io/config.h"
#include "io/h5.h"
#include "pipeline/qwen_image_21_sampler.h"

using namespace ditbatch;

namespace {

h5::File golden_file(const char* name) { return h5::File::open_read(test::golden(name)); }

Config config_of(const h5::File& f, const char* attr, const char* where) {
  return Config::parse(f.root().attr_string(attr), where);
}

}  // namespace

TEST(Pipeline21Golden, TextToImageAsDiffusersMakesIt) {
  CpuBackend be;
  const h5::File te_file = golden_file("text_encoder_21.h5"), dit_file = golden_file("transformer_21.h5"),
                 vae_file = golden_file("vae_21.h5"), f = golden_file("pipeline_21.h5");
  QwenTextEncoder text_encoder(be, TextEncoderConfig::from(config_of(te_file, "config_json", "text_encoder_21.h5")),
                               test::GoldenWeights(te_file.root().open_group("weights"), "model.language_model."));
  QwenImage21Transformer transformer(be, Transformer21Config::from(config_of(dit_file, "config_json", "transformer_21.h5")),
                                     test::GoldenWeights(dit_file.root().open_group("weights")));
  QwenImage21VaeDecoder vae(be, Vae21Config::from(config_of(vae_file, "config_json", "vae_21.h5")),
                            test::GoldenWeights(vae_file.root().open_group("weights")));
  Tokenizer tokenizer = Tokenizer::from_folder(test::golden("tiny-pipeline/tokenizer"));
  const PromptTemplate21 prompt_template{te_file.root().attr_string("template"), te_file.root().attr_int("drop_idx")};
  auto encode = [&](const std::string& prompt) {
    return encode_prompt_21(be, tokenizer, prompt_template, text_encoder, prompt);
  };
  const SchedulerConfig base = SchedulerConfig::from(config_of(f, "scheduler_config", "pipeline_21.h5"));
  const SchedulerConfig turbo = SchedulerConfig::from(config_of(f, "turbo_scheduler_config", "pipeline_21.h5"));
  const std::vector<double> turbo_sigmas = f.root().attr_doubles("turbo_sample_sigmas");

  // Every prompt of text_encoder_21.h5 through the sampler's encoding (an empty one as " ").
  h5::Group te_prompts = te_file.root().open_group("prompts");
  for (const auto& name : te_prompts.members()) {
    h5::Group g = te_prompts.open_group(name);
    EXPECT_LE(test::nmse(be.to_host_f32(encode(g.attr_string("prompt")).embeds),
                         g.read_tensor("prompt_embeds")),
              1e-10)
        << "text encoder prompt " << name;
  }

  h5::Group cases = f.root().open_group("cases");
  int checked = 0;
  for (const auto& name : cases.members()) {
    h5::Group g = cases.open_group(name);
    ImageJob job;
    job.prompt = g.attr_string("prompt");
    job.negative_prompt = g.attr_string("negative_prompt");
    job.width = g.attr_int("width");
    job.height = g.attr_int("height");
    job.steps = g.attr_int("steps");
    job.cfg = static_cast<float>(g.attr_double("true_cfg_scale"));
    job.seed = static_cast<uint64_t>(g.attr_int("seed"));
    job.true_cfg = job.cfg > 1.0f && g.has_dataset("negative_prompt_embeds");
    SCOPED_TRACE(fmt::format("case {}: {}x{}, {} steps, cfg {}, seed {}", name, job.width, job.height, job.steps,
                             job.cfg, job.seed));
    const PromptEmbedding prompt = encode(job.prompt);
    EXPECT_LE(test::nmse(be.to_host_f32(prompt.embeds), g.read_tensor("prompt_embeds")), 1e-10);
    std::optional<PromptEmbedding> negative;
    if (job.true_cfg) {
      negative = encode(job.negative_prompt);
      EXPECT_LE(test::nmse(be.to_host_f32(negative->embeds), g.read_tensor("negative_prompt_embeds")), 1e-10);
    }
    const int64_t S = (job.height / 16) * (job.width / 16);
    const Schedule schedule = g.attr_int("turbo") ? make_schedule_from_sigmas(turbo, turbo_sigmas, S)
                                                  : make_schedule(base, static_cast<int>(job.steps), S);
    EXPECT_EQ(schedule.steps(), g.attr_int("turbo") ? 8 : job.steps);
    int steps = 0;
    StageTimes times;
    const GeneratedImage image = generate_21(be, transformer, vae, job, schedule, prompt, negative ? &*negative : nullptr,
                                             [&](int, int) { ++steps; }, times);
    ASSERT_TRUE(image.ok) << image.error;
    EXPECT_EQ(steps, schedule.steps());
    EXPECT_LE(test::nmse(image.latents, g.read_tensor("latents")), 1e-9);
    const Tensor expected = g.read_tensor("image_uint8");  // [H, W, 4]
    ASSERT_EQ(std::ssize(image.pixels), expected.numel());
    const test::RgbAgreement agreement = test::rgb_agreement(image.pixels.data(), expected.numel(), expected);
    EXPECT_LE(agreement.max_diff, 1);
    EXPECT_GE(agreement.equal_fraction, 0.999);
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}
