// The scheduler's sigmas/timesteps and torch.randn noise, bit for bit against diffusers/torch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "cpu/cpu_backend.h"
#include "io/h5.h"
#include "io/weight_store.h"
#include "model/latent_packing.h"
#include "model/noise.h"
#include "io/config.h"
#include "model/scheduler.h"
#include "golden.h"
#include "test_util.h"

using namespace ditbatch;

namespace {

// Bit equality, with any NaN equal to any NaN (diffusers' 1-step schedule is 0/0).
bool same_bits(float a, float b) { return (std::isnan(a) && std::isnan(b)) || f32_bits(a) == f32_bits(b); }

SchedulerConfig golden_scheduler_config() {
  h5::File f = h5::File::open_read(test::golden("scheduler.h5"));
  return SchedulerConfig::from(Config::parse(f.root().attr_string("scheduler_config"), "scheduler.h5"));
}

}  // namespace

TEST(Scheduler, BitExactForEveryStepCountAndSequenceLength) {
  SchedulerConfig config = golden_scheduler_config();
  h5::File f = h5::File::open_read(test::golden("scheduler.h5"));
  h5::Group root = f.root();
  int checked = 0;
  for (int64_t steps : root.attr_ints("steps")) {
    for (int64_t seq : root.attr_ints("seq_lens")) {
      h5::Group g = root.open_group(fmt::format("steps_{}", steps)).open_group(fmt::format("seq_{}", seq));
      Tensor sigmas = g.read_tensor("sigmas"), timesteps = g.read_tensor("timesteps");
      Schedule s = make_schedule(config, static_cast<int>(steps), seq);
      EXPECT_EQ(s.mu, g.attr_double("mu")) << steps << " steps, S " << seq;
      ASSERT_EQ(static_cast<int64_t>(s.sigmas.size()), sigmas.numel());
      ASSERT_EQ(static_cast<int64_t>(s.timesteps.size()), timesteps.numel());
      for (int64_t i = 0; i < sigmas.numel(); ++i)
        EXPECT_TRUE(same_bits(s.sigmas[static_cast<size_t>(i)], sigmas.data<float>()[i]))
            << steps << " steps, S " << seq << ", sigma " << i << ": " << s.sigmas[static_cast<size_t>(i)] << " vs "
            << sigmas.data<float>()[i];
      for (int64_t i = 0; i < timesteps.numel(); ++i)
        EXPECT_TRUE(same_bits(s.timesteps[static_cast<size_t>(i)], timesteps.data<float>()[i]))
            << steps << " steps, S " << seq << ", timestep " << i;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 49);
}

TEST(Scheduler, SpecReferenceValuesAt1024Squared) {
  // qwen-image.md §3.5: 50 steps at 1024^2 (S = 4096), mu = 0.6935483870967742.
  Schedule s = make_schedule(golden_scheduler_config(), 50, 4096);
  EXPECT_DOUBLE_EQ(s.mu, 0.6935483870967742);
  EXPECT_EQ(f32_bits(s.sigmas[1]), 0x3f7d5d0au);
  EXPECT_EQ(f32_bits(s.sigmas[25]), 0x3f28fb5eu);
  EXPECT_EQ(f32_bits(s.sigmas[49]), 0x3ca3d700u);
  EXPECT_EQ(s.sigmas[50], 0.0f);
  EXPECT_EQ(s.timesteps[0], 1000.0f);
  // The (sigma*1000)/1000 round trip is not the identity in float32 for every step (spec §2.5:
  // 2 of 20 and 2 of 28 steps differ), so the model time must come from the timestep.
  int differs = 0;
  for (int steps : {20, 28})
    for (int64_t seq : {1024, 4096, 6889}) {
      Schedule t = make_schedule(golden_scheduler_config(), steps, seq);
      for (int i = 0; i < steps; ++i) {
        differs += t.model_time(i) != t.sigmas[static_cast<size_t>(i)];
        EXPECT_EQ(t.model_time(i), t.timesteps[static_cast<size_t>(i)] / 1000.0f);
      }
    }
  EXPECT_GT(differs, 0);
}

// Qwen-Image-2.1's schedules as its pipeline sets them: the base checkpoint's linspace over N
// steps with mu from the target's tokens (one per 16x16 pixels), and the Turbo checkpoint's
// sample_sigmas used as given under its scheduler (no dynamic shift, no terminal stretch).
TEST(Scheduler, BitExactForQwenImage21AndItsTurboGrid) {
  h5::File f = h5::File::open_read(test::golden("scheduler_21.h5"));
  int checked = 0;
  for (const std::string name : {"base", "turbo"}) {
    h5::Group gc = f.root().open_group(name);
    const SchedulerConfig config =
        SchedulerConfig::from(Config::parse(gc.attr_string("scheduler_config"), "scheduler_21.h5 " + name));
    const bool grid = gc.has_attr("sample_sigmas");
    EXPECT_EQ(grid, name == "turbo");
    for (const std::string& steps_name : gc.members()) {
      h5::Group gs = gc.open_group(steps_name);
      for (const std::string& size : gs.members()) {
        SCOPED_TRACE(fmt::format("{} {} {}", name, steps_name, size));
        h5::Group g = gs.open_group(size);
        const int64_t S = g.attr_int("image_seq_len");
        const Schedule s = grid ? make_schedule_from_sigmas(config, gc.attr_doubles("sample_sigmas"), S)
                                : make_schedule(config, std::stoi(steps_name.substr(6)), S);
        EXPECT_EQ(s.mu, g.attr_double("mu"));
        const Tensor sigmas = g.read_tensor("sigmas"), timesteps = g.read_tensor("timesteps");
        ASSERT_EQ(std::ssize(s.sigmas), sigmas.numel());
        ASSERT_EQ(std::ssize(s.timesteps), timesteps.numel());
        for (int64_t i = 0; i < sigmas.numel(); ++i)
          EXPECT_TRUE(same_bits(s.sigmas[static_cast<size_t>(i)], sigmas.data<float>()[i])) << "sigma " << i;
        for (int64_t i = 0; i < timesteps.numel(); ++i)
          EXPECT_TRUE(same_bits(s.timesteps[static_cast<size_t>(i)], timesteps.data<float>()[i])) << "timestep " << i;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 16);
}

TEST(Noise, BitExactWithTorchRandn) {
  h5::File f = h5::File::open_read(test::golden("noise.h5"));
  h5::Group cases = f.root().open_group("cases");
  for (const auto& name : cases.members()) {
    h5::Group c = cases.open_group(name);
    Tensor expected = c.read_tensor("noise");
    const uint64_t seed = static_cast<uint64_t>(c.attr_int("seed"));
    std::vector<float> got = torch_randn(seed, expected.numel());
    int64_t mismatches = 0;
    for (int64_t i = 0; i < expected.numel(); ++i)
      mismatches += f32_bits(got[static_cast<size_t>(i)]) != f32_bits(expected.data<float>()[i]);
    EXPECT_EQ(mismatches, 0) << "case " << name << " seed " << seed << " numel " << expected.numel();
  }
}

TEST(Noise, SpecTestVectorAndPacking) {
  // qwen-image.md §6.6: randn((1,1,16,128,128), manual_seed(42)).
  Tensor lat = initial_noise(42, 16, 128, 128);
  const float* d = lat.data<float>();
  const float first[8] = {1.92691529f, 1.48728406f, 0.900717199f, -2.10552096f,
                          0.678418458f, -1.23454487f, -0.0430674776f, -1.60466695f};
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(d[i], first[i]);
  EXPECT_FLOAT_EQ(d[lat.numel() - 1], -2.32941723f);
  CpuBackend be;
  Tensor packed = pack_latents(be, lat);
  ASSERT_EQ(packed.shape(), (Shape{4096, 64}));
  const float token0[8] = {1.92691529f, 1.48728406f, 1.93116057f, 1.01186383f,
                           -1.30465865f, 1.45070338f, 0.956631362f, -0.635082304f};
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(packed.data<float>()[i], token0[i]);
  // Unpacked: the noise again, in the decoder's NHWC layout.
  Tensor back = unpack_latents_nhwc(be, packed, 64, 64);  // [128, 128, 16]
  ASSERT_EQ(back.shape(), (Shape{128, 128, 16}));
  int64_t mismatches = 0;
  for (int64_t c = 0; c < 16; ++c)
    for (int64_t i = 0; i < 128 * 128; ++i) mismatches += back.data<float>()[i * 16 + c] != d[c * 128 * 128 + i];
  EXPECT_EQ(mismatches, 0);
}

// Scheduler configs whose every key passes its own check but whose sigmas are NaN or out of
// [0, 1] at some size (each image then failed as NaN after all its steps, blamed on the
// weights): refused before any work by --scheduler-config and by convert; the real ones pass.
TEST(Scheduler, ConfigsWhoseSigmasAreNotASchedule) {
  const auto config_of = [](const nlohmann::json& j) { return SchedulerConfig::from(Config::parse(j.dump(), "s.json")); };
  const nlohmann::json qwen = {{"base_image_seq_len", 256}, {"base_shift", 0.5},   {"max_image_seq_len", 8192},
                               {"max_shift", 0.9},          {"shift_terminal", 0.02}, {"use_dynamic_shifting", true},
                               {"time_shift_type", "exponential"}};
  EXPECT_NO_THROW(check_schedule(config_of(qwen), "qwen"));
  EXPECT_NO_THROW(check_schedule(lightning_scheduler(config_of(qwen)), "lightning"));
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"base_shift", 800.0}, {"max_shift", -800.0}}) {
    nlohmann::json bad = qwen;
    bad[key] = value;
    EXPECT_NE(test::input_error_of([&] { check_schedule(config_of(bad), "s.json"); }).find("s.json: this scheduler "
                                                                                            "config gives sigma"),
              std::string::npos)
        << key;
  }
  for (const double shift : {1e308, 1e-30}) {
    nlohmann::json fixed = {{"shift", shift}, {"use_dynamic_shifting", false}, {"shift_terminal", 0.02}};
    EXPECT_NE(test::input_error_of([&] { check_schedule(config_of(fixed), "s.json"); }).find("must be finite"),
              std::string::npos)
        << shift;
  }
  // The command line refuses it before any weight is read; convert before writing anything.
  test::TempDir dir;
  nlohmann::json bad = qwen;
  bad["base_shift"] = 800.0;
  test::write_text(dir / "s.json", bad.dump());
  const auto r = test::run(fmt::format("{} generate --weights {} --prompt x --scheduler-config {} --out {}", test::exe(),
                                       test::golden_weights(), dir / "s.json", dir / "out"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--scheduler-config " + (dir / "s.json") + ": this scheduler config gives sigma"),
            std::string::npos) << r.output;
  std::filesystem::copy(test::golden("tiny-pipeline"), dir / "pipe", std::filesystem::copy_options::recursive);
  test::write_text(dir / "pipe/scheduler/scheduler_config.json", bad.dump());
  const auto c = test::run(fmt::format("{} convert --from {} --to {}", test::exe(), dir / "pipe", dir / "c.h5"));
  EXPECT_EQ(c.status, 2) << c.output;
  EXPECT_NE(c.output.find("scheduler_config.json: this scheduler config gives sigma"), std::string::npos) << c.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "c.h5"));
}
