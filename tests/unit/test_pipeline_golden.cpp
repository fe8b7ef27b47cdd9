// The whole tiny QwenImagePipeline against diffusers: 3 prompts x {true CFG, no CFG} x
// {64x64, 48x80}, 6 steps. Noise bit-exact, prompt embeddings and final latents within fp32
// rounding, uint8 pixels within 1 with >= 99.9 % equal.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <set>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "golden.h"
#include "io/h5.h"
#include "model/latent_packing.h"
#include "model/noise.h"
#include "pipeline/qwen_image_pipeline.h"

using namespace ditbatch;
using test::batch_row;
using test::nchw_to_nhwc;
using test::squeeze0;

class PipelineGolden : public ::testing::TestWithParam<int> {};

TEST_P(PipelineGolden, MatchesDiffusers) {
  h5::File f = h5::File::open_read(test::golden("pipeline.h5"));
  h5::Group g = f.root().open_group("cases").open_group(fmt::format("{:02d}", GetParam()));
  ImageJob job = test::golden_pipeline_job(g);
  ASSERT_EQ(job.true_cfg, !job.negative_prompt.empty());
  SCOPED_TRACE(fmt::format("{}x{} cfg {} prompt '{}'", job.width, job.height, job.true_cfg, job.prompt));

  // The noise diffusers' prepare_latents drew, bit for bit.
  CpuBackend be;
  Tensor noise = pack_latents(be, initial_noise(job.seed, 16, job.latent_h(), job.latent_w()));
  Tensor golden_noise = squeeze0(g.read_tensor("noise"));
  ASSERT_EQ(noise.shape(), golden_noise.shape());
  EXPECT_EQ(std::memcmp(noise.raw(), golden_noise.raw(), noise.nbytes()), 0);

  Log log = Log::quiet();
  WeightStore weights = WeightStore::open(test::golden_weights());
  QwenImagePipeline pipeline(be, weights, log);
  PromptEmbedding prompt = pipeline.encode_prompt(job.prompt);
  EXPECT_LE(test::nmse(prompt.embeds, squeeze0(g.read_tensor("prompt_embeds"))), 1e-10);
  std::optional<PromptEmbedding> negative;
  if (job.true_cfg) {
    negative = pipeline.encode_prompt(job.negative_prompt);
    EXPECT_LE(test::nmse(negative->embeds, squeeze0(g.read_tensor("negative_prompt_embeds"))), 1e-10);
  }
  StageTimes times;
  int steps_seen = 0;
  GeneratedImage image = pipeline.generate(job, prompt, negative ? &*negative : nullptr,
                                           [&](int done, int total) {
                                             EXPECT_EQ(total, job.steps);
                                             steps_seen = done;
                                           },
                                           times);
  ASSERT_TRUE(image.ok) << image.error;
  EXPECT_EQ(steps_seen, job.steps);
  Tensor final_latents = squeeze0(g.read_tensor("final_latents"));
  EXPECT_LE(test::nmse(image.latents, final_latents), 1e-10);
  EXPECT_LT(test::max_abs_diff(image.latents, final_latents), 1e-4);

  Tensor expected_u8 = g.read_tensor("image_uint8");
  ASSERT_EQ(static_cast<int64_t>(image.pixels.size()), expected_u8.numel());
  const test::RgbAgreement agreement = test::rgb_agreement(image.pixels.data(), expected_u8.numel(), expected_u8);
  EXPECT_LE(agreement.max_diff, 1);
  EXPECT_GE(agreement.equal_fraction, 0.999);
}

INSTANTIATE_TEST_SUITE_P(AllCases, PipelineGolden, ::testing::Range(0, 12));

// A pipeline told its images up front computes their timesteps' conditioning while loading and
// drops the modulation weights: the same latents and image bits as one that computes it per step.
TEST(PipelineConditioning, AtLoadGivesTheSameImages) {
  h5::File f = h5::File::open_read(test::golden("pipeline.h5"));
  std::vector<ImageJob> jobs;
  for (const char* name : {"00", "05", "11"}) jobs.push_back(test::golden_pipeline_job(f.root().open_group("cases").open_group(name)));
  ASSERT_NE(jobs[0].width * jobs[0].height, jobs[2].width * jobs[2].height) << "two schedules wanted";
  CpuBackend be;
  Log log = Log::quiet();
  WeightStore weights = WeightStore::open(test::golden_weights());
  QwenImagePipeline per_step(be, weights, log), at_load(be, weights, log);
  per_step.load_denoiser();
  at_load.load_denoiser(jobs);
  std::set<uint32_t> distinct;
  for (const ImageJob& job : jobs) {
    const Schedule s = make_schedule(at_load.scheduler_config(), static_cast<int>(job.steps), job.grid_h() * job.grid_w());
    for (int i = 0; i < s.steps(); ++i) distinct.insert(f32_bits(s.model_time(i)));
  }
  EXPECT_EQ(conditioning_timesteps(at_load.scheduler_config(), jobs).size(), distinct.size());
  for (const ImageJob& job : jobs) {
    SCOPED_TRACE(fmt::format("{}x{}, {} steps", job.width, job.height, job.steps));
    PromptEmbedding prompt = per_step.encode_prompt(job.prompt);
    std::optional<PromptEmbedding> negative;
    if (job.true_cfg) negative = per_step.encode_prompt(job.negative_prompt);
    StageTimes times;
    const GeneratedImage a = per_step.generate(job, prompt, negative ? &*negative : nullptr, nullptr, times);
    const GeneratedImage b = at_load.generate(job, prompt, negative ? &*negative : nullptr, nullptr, times);
    ASSERT_TRUE(a.ok && b.ok) << a.error << b.error;
    EXPECT_EQ(std::memcmp(a.latents.raw(), b.latents.raw(), a.latents.nbytes()), 0);
    EXPECT_EQ(a.pixels, b.pixels);
  }
  // an image outside the plan fails, it is not silently computed with missing weights
  ImageJob other = jobs[0];
  other.steps += 1;
  PromptEmbedding prompt = per_step.encode_prompt(other.prompt);
  std::optional<PromptEmbedding> negative;
  if (other.true_cfg) negative = per_step.encode_prompt(other.negative_prompt);
  StageTimes times;
  EXPECT_THROW(at_load.generate(other, prompt, negative ? &*negative : nullptr, nullptr, times), Error);
  // a process with no image (more ranks than images, a finished share) keeps none of those weights either
  QwenImagePipeline none(be, weights, log);
  none.load_denoiser(std::vector<ImageJob>{});
  EXPECT_THROW(none.generate(jobs[0], prompt, negative ? &*negative : nullptr, nullptr, times), Error);
}
