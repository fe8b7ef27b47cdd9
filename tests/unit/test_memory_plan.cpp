// The GPU memory plan checked before any weight is read (src/pipeline/memory_plan.h, Qwen-Image's
// estimate in pipeline/qwen_image_model.h): its
// weight bytes are exactly what the models bind (their own weight specs, an independent
// count), and the check passes, points to --offload-text-encoder, or refuses, at the right
// free-memory thresholds, with the numbers in the message.
#include <gtest/gtest.h>

#include "golden.h"
#include "io/weight_store.h"
#include "model/text_encoder.h"
#include "model/transformer.h"
#include "model/vae.h"
#include "pipeline/memory_plan.h"
#include "pipeline/image_model.h"
#include "pipeline/qwen_image_model.h"
#include "test_util.h"

using namespace ditbatch;

namespace {

int64_t spec_bytes(const std::vector<WeightSpec>& specs, int64_t dtype_size) {
  int64_t n = 0;
  for (const WeightSpec& s : specs) n += shape_numel(s.shape);
  return n * dtype_size;
}

}  // namespace

TEST(MemoryPlan, WeightBytesAreWhatTheModelsBind) {
  const WeightStore weights = WeightStore::open(test::golden_weights());
  const DeviceMemoryPlan plan = qwen_image_device_memory(weights, 2, 256, 192, 40, 0);
  const Component te = weights.component("text_encoder");
  EXPECT_EQ(plan.transformer,
            spec_bytes(QwenImageTransformer::weight_specs(TransformerConfig::from(weights.component("transformer").config())), 2));
  EXPECT_EQ(plan.vae, spec_bytes(VaeDecoder::weight_specs(VaeConfig::from(weights.component("vae").config())), 2));
  EXPECT_EQ(plan.text_encoder,
            spec_bytes(QwenTextEncoder::weight_specs(TextEncoderConfig::from(te.config()), QwenTextEncoder::tensor_prefix(te)), 2));
  EXPECT_GT(plan.transformer, 0);
  // f32 weights take twice the bytes
  EXPECT_EQ(qwen_image_device_memory(weights, 4, 256, 192, 40, 0).transformer, 2 * plan.transformer);
  // a larger image needs more activations, the weights stay
  const DeviceMemoryPlan big = qwen_image_device_memory(weights, 2, 1024, 1024, 40, 0);
  EXPECT_GT(big.denoise_activations, plan.denoise_activations);
  EXPECT_EQ(big.transformer, plan.transformer);
}

// A run that knows its timesteps: the transformer holds every weight but those that only feed
// the conditioning (time embedder, modulation linears, norm_out's linear), plus the vectors (temb, 6 x D per block and stream, norm_out's 2 x D,
// f32) of each model time; with too many model times to pay, the weights stay.
TEST(MemoryPlan, ConditioningAtLoadReplacesTheModulationWeights) {
  const WeightStore weights = WeightStore::open(test::golden_weights());
  const TransformerConfig config = TransformerConfig::from(weights.component("transformer").config());
  std::vector<WeightSpec> kept;
  for (const WeightSpec& s : QwenImageTransformer::weight_specs(config))
    if (s.name.find(".img_mod.") == std::string::npos && s.name.find(".txt_mod.") == std::string::npos &&
        s.name.rfind("time_text_embed.", 0) != 0 && s.name.rfind("norm_out.linear", 0) != 0)
      kept.push_back(s);
  const int64_t D = config.inner_dim(), L = config.num_layers;
  const DeviceMemoryPlan plan = qwen_image_device_memory(weights, 2, 256, 192, 40, 4);
  EXPECT_EQ(plan.conditioning_timesteps, 4);
  EXPECT_EQ(plan.transformer, spec_bytes(kept, 2) + 4 * (D + 2 * L * 6 * D + 2 * D) * 4);
  EXPECT_LT(plan.transformer, qwen_image_device_memory(weights, 2, 256, 192, 40, 0).transformer);
  EXPECT_NE(plan.describe(false).find("4 timesteps' conditioning computed at load"), std::string::npos)
      << plan.describe(false);
  const DeviceMemoryPlan many = qwen_image_device_memory(weights, 2, 256, 192, 40, 100000);
  EXPECT_EQ(many.conditioning_timesteps, 0);
  EXPECT_EQ(many.transformer, qwen_image_device_memory(weights, 2, 256, 192, 40, 0).transformer);
}

TEST(MemoryPlan, PeakWithAndWithoutOffload) {
  DeviceMemoryPlan p;
  p.text_encoder = 15 * kGiB;
  p.transformer = 41 * kGiB;
  p.vae = kGiB / 4;
  p.denoise_activations = 2 * kGiB;
  p.encode_activations = kGiB / 2;
  EXPECT_EQ(p.peak(false), 15 * kGiB + 41 * kGiB + kGiB / 4 + 2 * kGiB);
  EXPECT_EQ(p.peak(true), 41 * kGiB + kGiB / 4 + 2 * kGiB);
  p.transformer = kGiB;  // a small transformer: the encoding phase is then the larger one
  EXPECT_EQ(p.peak(true), 15 * kGiB + kGiB / 2);
  EXPECT_NE(p.describe(false).find("text encoder 15.0"), std::string::npos) << p.describe(false);
}

TEST(MemoryPlan, TheCheckPassesSuggestsOffloadOrRefuses) {
  DeviceMemoryPlan p;  // Qwen-Image's sizes at 1024x1024
  p.text_encoder = 15 * kGiB;
  p.transformer = 41 * kGiB;
  p.vae = 3 * kGiB / 10;
  p.denoise_activations = 2 * kGiB;
  p.encode_activations = kGiB / 2;
  auto mem = [](int64_t free_bytes, int64_t total) {
    return Backend::MemoryInfo{static_cast<size_t>(free_bytes), static_cast<size_t>(total)};
  };
  // an H200: everything fits
  EXPECT_NO_THROW(check_device_memory(p, false, mem(139 * kGiB, 140 * kGiB), "cuda:0"));
  // a 48 GB card: only with the text encoder offloaded
  const std::string suggest = test::input_error_of([&] { check_device_memory(p, false, mem(47 * kGiB, 48 * kGiB), "cuda:0"); });
  EXPECT_NE(suggest.find("Run with --offload-text-encoder"), std::string::npos) << suggest;
  EXPECT_NE(suggest.find("cuda:0 has 47.0 GiB free of 48.0 GiB"), std::string::npos) << suggest;
  EXPECT_NE(suggest.find("needs about 59.3 GiB"), std::string::npos) << suggest;
  EXPECT_NO_THROW(check_device_memory(p, true, mem(47 * kGiB, 48 * kGiB), "cuda:0"));
  // a 40 GB card: not even then, and the message says so
  const std::string refuse = test::input_error_of([&] { check_device_memory(p, false, mem(39 * kGiB, 40 * kGiB), "cuda:1"); });
  EXPECT_NE(refuse.find("even with --offload-text-encoder"), std::string::npos) << refuse;
  EXPECT_NE(refuse.find("Use a GPU with more free memory"), std::string::npos) << refuse;
  EXPECT_EQ(refuse.find("other processes"), std::string::npos) << refuse;
  // the same card half taken by someone else: the message points at them
  const std::string shared = test::input_error_of([&] { check_device_memory(p, true, mem(20 * kGiB, 80 * kGiB), "cuda:0"); });
  EXPECT_NE(shared.find("other processes hold part of this one"), std::string::npos) << shared;
  // two ranks sharing an H200 (--ranks-per-gpu 2) each need their own copy
  EXPECT_NO_THROW(check_device_memory(p, true, mem(139 * kGiB, 140 * kGiB), "cuda:0", 2));
  const std::string two = test::input_error_of([&] { check_device_memory(p, false, mem(100 * kGiB, 140 * kGiB), "cuda:0", 2); });
  EXPECT_NE(two.find("2 ranks x ("), std::string::npos) << two;
  EXPECT_NE(two.find("Run with --offload-text-encoder"), std::string::npos) << two;
  const std::string three = test::input_error_of([&] { check_device_memory(p, true, mem(100 * kGiB, 140 * kGiB), "cuda:0", 3); });
  EXPECT_NE(three.find("Use fewer ranks per GPU"), std::string::npos) << three;
  // exactly at the threshold (peak + 1 GiB margin) it passes; one byte less, it does not
  EXPECT_NO_THROW(check_device_memory(p, true, mem(p.peak(true) + kGiB, 80 * kGiB), "cuda:0"));
  EXPECT_THROW(check_device_memory(p, true, mem(p.peak(true) + kGiB - 1, 80 * kGiB), "cuda:0"), InputError);
}

// Qwen-Image-2.1's plan (pipeline/qwen_image_21_model.h), on the converted diffusers folder: the
// transformer's bytes are the parameters its config makes, counted from the spec (no biases; per
// block q, k, v, out, the gated MLP's three linears, the two QK-norm gains), the text encoder's
// only its language model's (the folder's text encoder holds no more here, so against the
// model's own list), the VAE's only its decoder's.
TEST(MemoryPlan, Qwen21CountsTheWeightsItLoads) {
  test::TempDir dir;
  ASSERT_EQ(test::run(test::exe() + " convert --from " + test::golden("tiny-pipeline-21") + " --to " + (dir / "v21.h5"))
                .status,
            0);
  const WeightStore weights = WeightStore::open(dir / "v21.h5");
  const std::unique_ptr<ImageModel> model = ImageModel::open(weights);
  const Config dit = weights.component("transformer").config();
  const int64_t D = dit.get_int("num_attention_heads") * dit.get_int("attention_head_dim"), F = 3 * D,
                C = dit.get_int("in_channels"), ctx = dit.get_int("context_in_dim"),
                Dh = dit.get_int("attention_head_dim"), layers = dit.get_int("num_layers");
  const int64_t params = D * C + ctx + D * ctx + D * D + D * 256 + D * D + 4 * D * D  // img_in, txt_in, time, modulation
                         + layers * (4 * D * D + 2 * Dh + 3 * D * F)                 // blocks
                         + D * D + C * D;                                            // norm_out, proj_out
  ImageJob job;
  job.width = 256;
  job.height = 128;
  job.steps = 40;
  job.prompt = "a red fox";
  const DeviceMemoryPlan plain = model->device_memory(2, {job}, 0, SchedulerConfig{});
  EXPECT_EQ(plain.transformer, 2 * params);
  const Component te = weights.component("text_encoder");
  EXPECT_EQ(plain.text_encoder,
            spec_bytes(QwenTextEncoder::weight_specs(TextEncoderConfig::from(te.config()), QwenTextEncoder::tensor_prefix(te)), 2));
  int64_t decoder = 0;
  for (const std::string& name : weights.component("vae").tensor_names())
    if (name.rfind("decoder.", 0) == 0 || name.rfind("post_quant_conv.", 0) == 0)
      decoder += shape_numel(weights.component("vae").tensor_info(name).shape);
  EXPECT_EQ(plain.vae, 2 * decoder);
  EXPECT_LT(plain.vae, 2 * [&] {
    int64_t all = 0;
    for (const std::string& name : weights.component("vae").tensor_names())
      all += shape_numel(weights.component("vae").tensor_info(name).shape);
    return all;
  }());
}
