// `ditbatch bench`: smoke tests on the tiny configs (not timed: the figures are not checked,
// only that the command runs, reports them, and counts FLOPs as the GEMM shapes say).
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "model/transformer.h"
#include "test_util.h"
#include "tiny_model.h"

using namespace ditbatch;

namespace {

nlohmann::json bench_json(const std::string& output) {
  std::istringstream lines(output);
  std::string line;
  const std::string prefix = "BENCH_JSON ";
  while (std::getline(lines, line))
    if (line.rfind(prefix, 0) == 0) return nlohmann::json::parse(line.substr(prefix.size()));
  ADD_FAILURE() << "no BENCH_JSON line in:\n" << output;
  return nlohmann::json::object();
}

// FLOPs of one forward, from the shapes of its GEMMs: 2 * M * N * K for each.
double tiny_forward_flops_from_gemms(int64_t S, int64_t L) {
  // make-tiny's transformer: 2 blocks, 2 heads x 32, joint dim 64, in/out 64 channels.
  const int64_t blocks = 2, H = 2, Dh = 32, D = H * Dh, F = 4 * D, J = 64, in = 64, out = 64;
  struct Gemm {
    int64_t m, n, k, count;
  };
  std::vector<Gemm> gemms = {{S, D, in, 1}, {L, D, J, 1}, {S, out, D, 1}};  // img_in, txt_in, proj_out
  for (int64_t b = 0; b < blocks; ++b) {
    gemms.push_back({S, D, D, 4});           // to_q, to_k, to_v, to_out.0
    gemms.push_back({L, D, D, 4});           // add_q/k/v_proj, to_add_out
    gemms.push_back({S, F, D, 1});           // img_mlp.net.0.proj
    gemms.push_back({S, D, F, 1});           // img_mlp.net.2
    gemms.push_back({L, F, D, 1});           // txt_mlp.net.0.proj
    gemms.push_back({L, D, F, 1});           // txt_mlp.net.2
    gemms.push_back({S + L, S + L, Dh, H});  // Q K^T per head, joint sequence
    gemms.push_back({S + L, Dh, S + L, H});  // P V per head
  }
  double flops = 0;
  for (const Gemm& g : gemms) flops += 2.0 * static_cast<double>(g.m * g.n * g.k * g.count);
  return flops;
}

}  // namespace

TEST(Bench, DitReportsTimesAndTheForwardFlops) {
  auto r = test::run(test::exe() + " bench dit --config tiny --size 64x64 --steps 1 --text-tokens 7 --backend cpu");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("ms/forward"), std::string::npos) << r.output;
  nlohmann::json j = bench_json(r.output);
  const int64_t S = (64 / 16) * (64 / 16), L = 7;
  EXPECT_EQ(j["bench"], "dit");
  EXPECT_EQ(j["image_tokens"], S);
  EXPECT_EQ(j["text_tokens"], L);
  EXPECT_EQ(j["num_layers"], 2);
  EXPECT_EQ(j["timed"], 1);

  TransformerConfig tiny;
  tiny.num_layers = 2;
  tiny.num_attention_heads = 2;
  tiny.attention_head_dim = 32;
  tiny.joint_attention_dim = 64;
  tiny.axes_dims_rope = {8, 12, 12};
  const double expected = tiny_forward_flops_from_gemms(S, L);
  EXPECT_DOUBLE_EQ(QwenImageTransformer::forward_flops(tiny, S, L), expected);
  EXPECT_DOUBLE_EQ(j["flops"].get<double>(), expected);

  EXPECT_GT(j["ms_per_forward_mean"].get<double>(), 0.0);
  EXPECT_LE(j["ms_per_forward_min"].get<double>(), j["ms_per_forward_mean"].get<double>());
  EXPECT_GT(j["gflops_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["peak_rss_mib"].get<double>(), 1.0);
  EXPECT_GE(j["threads"].get<int>(), 1);
}

TEST(Bench, DitWithCfgTimesTwoForwardsAStep) {
  auto r = test::run(test::exe() + " bench dit --config tiny --size 32x48 --steps 2 --warmup 0 --cfg --backend cpu");
  ASSERT_EQ(r.status, 0) << r.output;
  nlohmann::json j = bench_json(r.output);
  EXPECT_EQ(j["timed"], 4);
  EXPECT_EQ(j["image_tokens"], 2 * 3);
  EXPECT_EQ(j["cfg"], true);
}

TEST(Bench, DitFromAWeightFileConditionsAtLoadAsGenerate) {
  auto r = test::run(test::exe() + " bench dit --weights " + test::tiny_model() +
                     " --size 32x48 --steps 2 --warmup 1 --cfg --backend cpu");
  ASSERT_EQ(r.status, 0) << r.output;
  // the warm-up's model time 1 is also the first step's: 2 distinct
  EXPECT_NE(r.output.find("computed while loading for the 2 model times (as generate)"), std::string::npos) << r.output;
  const nlohmann::json j = bench_json(r.output);
  EXPECT_EQ(j["num_layers"], 2);
  EXPECT_EQ(j["conditioning_at_load"], true);
}

// An edit family's DiT: the condition images' tokens ride in every GEMM and in the joint
// attention, so a forward over S noise tokens and two condition images of the same size costs what
// a forward over 3S tokens does; 2511 modulates them at t = 0; a text-to-image family takes none.
TEST(Bench, DitOfAnEditFamilyCountsTheConditionTokens) {
  auto r = test::run(test::exe() + " bench dit --config tiny --model qwen-image-edit-2511 --condition-images 2 --size 64x64 "
                     "--steps 1 --text-tokens 7 --backend cpu");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = bench_json(r.output);
  const int64_t S = (64 / 16) * (64 / 16), L = 7;
  EXPECT_EQ(j["image_tokens"], S);
  EXPECT_EQ(j["condition_tokens"], 2 * S);
  EXPECT_EQ(j["zero_cond_t"], true);
  EXPECT_DOUBLE_EQ(j["flops"].get<double>(), tiny_forward_flops_from_gemms(3 * S, L));
  r = test::run(test::exe() + " bench dit --config tiny --model qwen-image-edit-2509 --size 64x64 --steps 1 --backend cpu");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(bench_json(r.output)["condition_tokens"], S);  // one input image unless told
  EXPECT_EQ(bench_json(r.output)["zero_cond_t"], false);
  r = test::run(test::exe() + " bench dit --config tiny --condition-images 1 --backend cpu");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("qwen-image takes no input image"), std::string::npos) << r.output;
}

// Qwen-Image-2.1's transformer (--model qwen-image-2.1, or a 2.1 weight file): a cached step, whose
// FLOPs are those of its GEMMs over the S image rows (the text's K and V come from the cache).
TEST(Bench, DitOfQwenImage21TimesCachedSteps) {
  auto r = test::run(test::exe() + " bench dit --model qwen-image-2.1 --config tiny --size 64x96 --steps 2 "
                                   "--text-tokens 5 --cfg --backend cpu");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = bench_json(r.output);
  const int64_t S = (96 / 16) * (64 / 16), L = 5;
  EXPECT_EQ(j["model"], "qwen-image-2.1");
  EXPECT_EQ(j["image_tokens"], S);
  EXPECT_EQ(j["timed"], 4);  // 2 steps of 2 forwards
  // make-tiny's 2.1 transformer: 2 blocks, 2 heads x 32, 16 latent channels, the gated MLP 3 x D wide.
  const int64_t blocks = 2, H = 2, Dh = 32, D = H * Dh, F = 3 * D, C = 16;
  double flops = 2.0 * (S * D * C + S * C * D);  // img_in, proj_out
  for (int64_t b = 0; b < blocks; ++b)
    flops += 2.0 * (4 * S * D * D       // to_q, to_k, to_v, to_out.0
                    + 2 * S * F * D     // img_mlp.proj, img_mlp.gate_layer
                    + S * D * F         // img_mlp.out
                    + 2 * H * S * (S + L) * Dh);  // Q K^T and P V of the image rows against every key
  EXPECT_DOUBLE_EQ(j["flops"].get<double>(), flops);

  // A 2.1 weight file's transformer is benched as 2.1's, whatever --model says.
  test::TempDir dir;
  ASSERT_EQ(test::run(test::exe() + " make-tiny --model qwen-image-2.1 --out " + (dir / "t21.h5")).status, 0);
  r = test::run(test::exe() + " bench dit --weights " + (dir / "t21.h5") + " --size 32x32 --steps 1 --backend cpu");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(bench_json(r.output)["model"], "qwen-image-2.1");
}

TEST(Bench, VaeAndTextEncoderRun) {
  auto vae = test::run(test::exe() + " bench vae --config tiny --size 32x32 --steps 1 --warmup 0 --backend cpu");
  ASSERT_EQ(vae.status, 0) << vae.output;
  EXPECT_EQ(bench_json(vae.output)["bench"], "vae");
  auto text = test::run(test::exe() + " bench text --config tiny --text-tokens 9 --steps 1 --warmup 0 --backend cpu");
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_GT(bench_json(text.output)["flops"].get<double>(), 0.0);
}

// The load bench runs generate's load to the first step, and reads the file it names: the
// bytes it reports are the file's size on disk (an independent count), in both cache modes.
TEST(Bench, LoadTimesTheFileAndThePipelineLoad) {
  auto r = test::run(test::exe() + " bench load --weights " + test::tiny_model() +
                     " --steps 1 --warmup 0 --cache both --backend cpu");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = bench_json(r.output);
  EXPECT_EQ(j["file_bytes"].get<uint64_t>(), std::filesystem::file_size(test::tiny_model()));
  for (const char* cache : {"warm", "cold"}) {
    ASSERT_TRUE(j.contains(cache)) << r.output;
    EXPECT_GT(j[cache]["read_s"].get<double>(), 0.0) << cache;
    for (const char* access : {"mapped", "read"}) {  // the default load, and DITBATCH_NO_MMAP's
      ASSERT_TRUE(j[cache].contains(access)) << r.output;
      const nlohmann::json& a = j[cache][access];
      for (const char* field : {"load_s", "text_encoder_s", "prompt_s", "denoiser_s", "first_step_s", "ratio"})
        EXPECT_GT(a[field].get<double>(), 0.0) << cache << " " << access << " " << field;
      EXPECT_GE(a["to_first_step_s"].get<double>(), a["load_s"].get<double>());
      EXPECT_NEAR(a["ratio"].get<double>(), j[cache]["read_s"].get<double>() / a["load_s"].get<double>(), 1e-9);
    }
  }
  EXPECT_NE(r.output.find("load rate / read rate:  warm mapped"), std::string::npos) << r.output;
  // A random pipeline is written only in a dtype and format it can be: refused before writing.
  test::TempDir dir;
  auto bad = test::run(test::exe() + " bench load --out " + dir / "never.h5" + " --dtype f16 --backend cpu");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("--dtype f16: expected bf16 or f32"), std::string::npos) << bad.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "never.h5"));
  auto no_layers = test::run(test::exe() + " bench load --out " + dir / "never.h5" + " --layers 0 --backend cpu");
  EXPECT_EQ(no_layers.status, 2) << no_layers.output;
  EXPECT_NE(no_layers.output.find("--layers 0: expected at least 1"), std::string::npos) << no_layers.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "never.h5"));
}

// An Edit file's load reaches the first step from an input image it makes itself (the prompt is
// encoded with it, the condition latents from it), and leaves no image behind in the temp folder.
TEST(Bench, LoadRunsAnEditFileFromASyntheticInputImage) {
  test::TempDir dir;
  ASSERT_EQ(test::run(test::exe() + " make-tiny --model qwen-image-edit-2511 --out " + (dir / "edit.h5")).status, 0);
  auto r = test::run(fmt::format("TMPDIR={} {} bench load --weights {} --steps 1 --warmup 0 --cache warm --access mapped "
                                 "--backend cpu",
                                 dir.path(), test::exe(), dir / "edit.h5"));
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json a = bench_json(r.output)["warm"]["mapped"];
  for (const char* field : {"prompt_s", "first_step_s"}) EXPECT_GT(a[field].get<double>(), 0.0) << field;
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"edit.h5"});
}

// The convert bench converts a folder written from the file and says the checksum came back.
TEST(Bench, ConvertTimesTheWriteAndGivesBackTheChecksum) {
  test::TempDir dir;
  auto r = test::run(test::exe() + " bench convert --weights " + test::tiny_model() + " --out " + (dir / "scratch") +
                     " --steps 1 --warmup 0");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = bench_json(r.output);
  EXPECT_TRUE(j["same_checksum"].get<bool>()) << r.output;
  for (const char* field : {"write_s", "convert_s", "validate_s", "stream_s", "finish_s", "ratio"})
    EXPECT_GT(j[field].get<double>(), 0.0) << field;
  // The phases are a split of the whole, not three more timings of it.
  EXPECT_NEAR(j["validate_s"].get<double>() + j["stream_s"].get<double>() + j["finish_s"].get<double>(),
              j["convert_s"].get<double>(), 1e-6);
  EXPECT_LE(j["write_only_s"].get<double>(), j["write_s"].get<double>());
  EXPECT_GT(j["file_bytes"].get<double>(), 0.9 * static_cast<double>(std::filesystem::file_size(test::tiny_model())));
  EXPECT_FALSE(std::filesystem::exists(dir / "scratch")) << "the scratch folder is removed";
}

TEST(Bench, BadInputIsAUsageError) {
  auto size = test::run(test::exe() + " bench dit --config tiny --size 60x64");
  EXPECT_EQ(size.status, 2) << size.output;
  EXPECT_NE(size.output.find("multiples of 16"), std::string::npos) << size.output;
  auto config = test::run(test::exe() + " bench dit --config huge");
  EXPECT_EQ(config.status, 2) << config.output;
  EXPECT_NE(config.output.find("tiny, small, real"), std::string::npos) << config.output;
  auto what = test::run(test::exe() + " bench unet");
  EXPECT_EQ(what.status, 2) << what.output;
}
