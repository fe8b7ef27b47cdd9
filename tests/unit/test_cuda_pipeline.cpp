// The tiny golden models on CUDA (the same goldens the CPU tests meet at fp32 rounding):
// the transformer (text to image, and Edit's condition images with zero_cond_t), the VAE
// decoder, the text encoder and the whole pipeline, each in f32 mode (must agree with
// diffusers nearly as well as the CPU does) and in bf16 mode (the fast path:
// the figures are reported, with bounds that catch a broken kernel rather than grade bf16).
// Every figure is printed as a "[cuda-metric]" line for tools/device/check.sh.
#include <gtest/gtest.h>

#ifndef DITBATCH_HAVE_CUDA

TEST(CudaGolden, SkippedWithoutCudaBuild) { GTEST_SKIP() << "built without CUDA (-DDITBATCH_CUDA=OFF)"; }

#else

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <utility>

#include "cpu/cpu_backend.h"
#include "cuda_test_util.h"
#include "golden.h"
#include "io/config.h"
#include "io/h5.h"
#include "model/noise.h"
#include "model/text_encoder.h"
#include "model/transformer.h"
#include "model/vae.h"
#include "model/vae_encoder.h"
#include "model/qwen_image_21/transformer.h"
#include "model/qwen_image_21/vae.h"
#include "model/qwen_vl_vision.h"
#include "pipeline/qwen_image_pipeline.h"

using namespace ditbatch;
using test::batch_row;
using test::nchw_to_nhwc;
using test::squeeze0;
using test::metric;

namespace {

std::unique_ptr<CudaBackend> make_backend(DType act) { return test::make_cuda_test_backend(act, false); }

// f32 mode: the CPU meets the goldens at ~1e-10; a GPU in fp32 sums in other orders.
// bf16 mode: one bf16 rounding is ~1e-6 of nmse; these bounds only catch broken kernels.
double component_bound(DType act) { return act == DType::F32 ? 1e-7 : 1e-3; }

class CudaGolden : public ::testing::TestWithParam<DType> {};

// Each case of a golden file's cases/ group: result_of(case) gives (ours, diffusers'), held to
// the same shape and bound. Returns the worst nmse.
double worst_case_nmse(const std::string& file, double bound,
                       const std::function<std::pair<Tensor, Tensor>(const h5::Group&)>& result_of) {
  h5::File f = h5::File::open_read(test::golden(file));
  h5::Group cases = f.root().open_group("cases");
  double worst = 0;
  for (const auto& name : cases.members()) {
    const auto [got, expected] = result_of(cases.open_group(name));
    EXPECT_EQ(got.shape(), expected.shape()) << file << " case " << name;
    const double err = got.shape() == expected.shape() ? test::nmse(got, expected) : INFINITY;
    worst = std::max(worst, err);
    EXPECT_LE(err, bound) << file << " case " << name;
  }
  EXPECT_GE(cases.members().size(), 3u) << file;
  return worst;
}

std::string mode_name(const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); }

}  // namespace

TEST_P(CudaGolden, Transformer) {
  SKIP_WITHOUT_GPU();
  const DType act = GetParam();
  auto be = make_backend(act);
  WeightStore store = WeightStore::open(test::golden_weights());
  QwenImageTransformer model(*be, store.component("transformer"));
  h5::File f = h5::File::open_read(test::golden("transformer.h5"));
  double worst = 0;
  for (const char* name : {"even", "odd", "nomask"}) {
    h5::Group g = f.root().open_group("cases").open_group(name);
    const int64_t h = g.attr_int("h"), w = g.attr_int("w");
    Tensor latents = g.read_tensor("hidden_states"), text = g.read_tensor("encoder_hidden_states");
    Tensor timestep = g.read_tensor("timestep"), output = g.read_tensor("output");
    const bool has_mask = g.has_dataset("encoder_hidden_states_mask");
    Tensor mask = has_mask ? g.read_tensor("encoder_hidden_states_mask") : Tensor();
    const int64_t B = latents.dim(0), L = text.dim(1);
    for (int64_t b = 0; b < B; ++b) {
      int64_t valid = L;
      if (has_mask) {
        valid = 0;
        for (int64_t j = 0; j < L; ++j) valid += mask.data<int64_t>()[b * L + j] != 0;
      }
      TimestepConditioning cond = model.condition(timestep.data<float>()[b]);
      Tensor out = be->to_host_f32(model.forward(be->upload(batch_row(latents, b), DType::F32),
                                                 be->upload(batch_row(text, b), DType::F32), valid, h, w, cond));
      const double err = test::nmse(out, batch_row(output, b));
      worst = std::max(worst, err);
      EXPECT_LE(err, component_bound(act)) << name << " row " << b;
    }
  }
  metric(fmt::format("golden.{}.transformer.worst_nmse", dtype_name(act)), worst);
}

// True CFG's batch on the GPU: golden row 1 (padded text) as cond, row 0's text cut by one
// token with the last two of the rest as padding as negative (two lengths, both padded), at
// row 1's latents and timestep. The cond velocity is diffusers' output for row 1; the negative
// one has no golden, so it meets the CPU backend's forward (itself checked against diffusers).
// The bf16 bound is 10x what the emulated kernels reach and 10x below the distance between
// the two velocities, so that a sample mixed up with the other cannot pass.
TEST_P(CudaGolden, CfgBatch) {
  SKIP_WITHOUT_GPU();
  const DType act = GetParam();
  auto be = make_backend(act);
  CpuBackend cpu;
  WeightStore store = WeightStore::open(test::golden_weights());
  QwenImageTransformer model(*be, store.component("transformer")), cpu_model(cpu, store.component("transformer"));
  h5::File f = h5::File::open_read(test::golden("transformer.h5"));
  h5::Group g = f.root().open_group("cases").open_group("even");
  const int64_t h = g.attr_int("h"), w = g.attr_int("w");
  Tensor text = g.read_tensor("encoder_hidden_states"), mask = g.read_tensor("encoder_hidden_states_mask");
  const int64_t L = text.dim(1);
  int64_t valid1 = 0;
  for (int64_t j = 0; j < L; ++j) valid1 += mask.data<int64_t>()[L + j] != 0;
  ASSERT_LT(valid1, L) << "row 1 of the golden should be padded";
  const Tensor latents = batch_row(g.read_tensor("hidden_states"), 1), text1 = batch_row(text, 1),
               neg_text = batch_row(text, 0).slice0(0, L - 1).clone();
  const int64_t neg_valid = L - 3;
  const float t = g.read_tensor("timestep").data<float>()[1];
  TimestepConditioning cond = model.condition(t);
  auto [v_cond, v_neg] = model.forward_cfg(be->upload(latents, DType::F32), be->upload(text1, DType::F32), valid1,
                                           be->upload(neg_text, DType::F32), neg_valid, h, w, cond);
  TimestepConditioning cpu_cond = cpu_model.condition(t);
  const Tensor cpu_neg = cpu_model.forward(latents, neg_text, neg_valid, h, w, cpu_cond);
  const Tensor golden_cond = batch_row(g.read_tensor("output"), 1);
  const double bound = act == DType::F32 ? 1e-7 : 2e-4;
  ASSERT_GT(test::nmse(cpu_neg, golden_cond), 10 * bound) << "the two velocities must be told apart";
  const double err_cond = test::nmse(be->to_host_f32(v_cond), golden_cond);
  const double err_neg = test::nmse(be->to_host_f32(v_neg), cpu_neg);
  EXPECT_LE(err_cond, bound);
  EXPECT_LE(err_neg, bound);
  metric(fmt::format("golden.{}.cfg_batch.cond_nmse_vs_diffusers", dtype_name(act)), err_cond);
  metric(fmt::format("golden.{}.cfg_batch.neg_nmse_vs_cpu", dtype_name(act)), err_neg);
}

// The Edit transformer on the GPU (qwen-image-edit.md §9): condition images in the image stream
// and zero_cond_t's t = 0 rows, as true CFG's batch of two padded texts against diffusers' batch
// of two (transformer_edit.h5). Bounds as CfgBatch's; the two velocities must be told apart.
TEST_P(CudaGolden, TransformerEdit) {
  SKIP_WITHOUT_GPU();
  const DType act = GetParam();
  auto be = make_backend(act);
  WeightStore store = WeightStore::open(test::golden_weights());
  const Component component = store.component("transformer");
  TransformerConfig config = TransformerConfig::from(component.config());
  config.zero_cond_t = true;
  QwenImageTransformer model(*be, config, ComponentLoader(component));
  h5::File f = h5::File::open_read(test::golden("transformer_edit.h5"));
  h5::Group g = f.root().open_group("cases").open_group("cfg_batch");
  const Tensor shapes = g.read_tensor("img_shapes");  // [images, 2]: (h, w), noise first
  std::vector<PackedGrid> img_shapes;
  for (int64_t k = 0; k < shapes.dim(0); ++k)
    img_shapes.push_back({shapes.data<int64_t>()[2 * k], shapes.data<int64_t>()[2 * k + 1]});
  const Tensor text = g.read_tensor("encoder_hidden_states"), mask = g.read_tensor("encoder_hidden_states_mask");
  const int64_t L = text.dim(1);
  std::array<int64_t, 2> valid{};
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t j = 0; j < L; ++j) valid[b] += mask.data<int64_t>()[b * L + j] != 0;
  const Tensor output = g.open_group("zero_cond_t").read_tensor("output");  // [2, S0, 64]
  const double bound = act == DType::F32 ? 1e-7 : 2e-4;
  // The texts' velocities differ by an nmse of ~1.2e-3: a swap of the two would fail either bound.
  ASSERT_GT(test::nmse(batch_row(output, 1), batch_row(output, 0)), 4 * bound) << "the two velocities must be told apart";
  TimestepConditioning cond = model.condition(g.read_tensor("timestep").data<float>()[0]);
  auto [v_cond, v_neg] = model.forward_cfg(be->upload(batch_row(g.read_tensor("hidden_states"), 0), DType::F32),
                                           be->upload(batch_row(text, 0), DType::F32), valid[0],
                                           be->upload(batch_row(text, 1), DType::F32), valid[1], img_shapes, cond);
  const double err_cond = test::nmse(be->to_host_f32(v_cond), batch_row(output, 0));
  const double err_neg = test::nmse(be->to_host_f32(v_neg), batch_row(output, 1));
  EXPECT_LE(err_cond, bound);
  EXPECT_LE(err_neg, bound);
  metric(fmt::format("golden.{}.transformer_edit.cond_nmse", dtype_name(act)), err_cond);
  metric(fmt::format("golden.{}.transformer_edit.neg_nmse", dtype_name(act)), err_neg);
}

// Conditioning computed while loading on the GPU: the bits a loaded model computes per step, and
// the modulation weights' memory is not held.
TEST_P(CudaGolden, ConditioningAtLoad) {
  SKIP_WITHOUT_GPU();
  auto be = make_backend(GetParam());
  const WeightStore store = WeightStore::open(test::golden_weights());
  const Component component = store.component("transformer");
  const TransformerConfig config = TransformerConfig::from(component.config());
  const size_t before = be->stats().bytes_in_use;
  QwenImageTransformer loaded(*be, config, ComponentLoader(component));
  const size_t loaded_bytes = be->stats().bytes_in_use - before;
  ComponentLoader loader(component);
  QwenImageTransformer at_load(*be, config, loader, {0.9375f, 0.25f});
  const size_t at_load_bytes = be->stats().bytes_in_use - before - loaded_bytes;
  const int64_t saved = QwenImageTransformer::conditioning_weight_bytes(config, dtype_size(be->weight_dtype())) -
                        QwenImageTransformer::conditioning_bytes(config, 2);
  // what the weight dtype's count says, within the f32 biases (~2 %) and the allocator's rounding
  const double measured = static_cast<double>(loaded_bytes) - static_cast<double>(at_load_bytes);
  EXPECT_NEAR(measured, static_cast<double>(saved), 0.05 * static_cast<double>(saved))
      << "loaded " << loaded_bytes << " B, at load " << at_load_bytes << " B";
  auto same_bits = [&](const Tensor& a, const Tensor& b) {
    const Tensor ha = be->to_host(a), hb = be->to_host(b);
    return ha.shape() == hb.shape() && ha.dtype() == hb.dtype() && std::memcmp(ha.raw(), hb.raw(), ha.nbytes()) == 0;
  };
  for (float tt : {0.9375f, 0.25f}) {
    const TimestepConditioning want = loaded.condition(tt), got = at_load.condition(tt);
    EXPECT_TRUE(same_bits(got.temb, want.temb)) << tt;
    EXPECT_TRUE(same_bits(got.norm_out, want.norm_out)) << tt;
    for (size_t i = 0; i < want.img_mod.size(); ++i) {
      EXPECT_TRUE(same_bits(got.img_mod[i], want.img_mod[i])) << tt << " block " << i;
      EXPECT_TRUE(same_bits(got.txt_mod[i], want.txt_mod[i])) << tt << " block " << i;
    }
  }
  metric(fmt::format("golden.{}.conditioning_at_load.bytes_saved", dtype_name(GetParam())), measured);
}

TEST_P(CudaGolden, VaeDecoder) {
  SKIP_WITHOUT_GPU();
  const DType act = GetParam();
  auto be = make_backend(act);
  VaeDecoder vae(*be, test::golden_store().component("vae"));
  const double worst = worst_case_nmse("vae.h5", component_bound(act), [&](const h5::Group& g) {
    Tensor z = g.read_tensor("z");  // [1, 16, 1, h, w]
    const int64_t h = z.dim(3), w = z.dim(4);
    Tensor decoded = be->to_host_f32(vae.decode(z.view({16, h, w})));
    return std::pair{decoded, nchw_to_nhwc(g.read_tensor("decoded"))};
  });
  metric(fmt::format("golden.{}.vae.worst_nmse", dtype_name(act)), worst);
}

// The Edit pipelines' image latents: the normalised posterior mode as packed tokens, for each
// golden image (the stride-2 convolutions included).
TEST_P(CudaGolden, VaeEncoder) {
  SKIP_WITHOUT_GPU();
  auto be = make_backend(GetParam());
  VaeEncoder vae(*be, test::golden_store().component("vae"));
  const double worst = worst_case_nmse("vae_encoder.h5", component_bound(GetParam()), [&](const h5::Group& g) {
    const Tensor image = g.read_tensor("image");  // [1, 3, 1, h, w]
    const Tensor packed = be->to_host_f32(vae.encode_packed(image.view({3, image.dim(3), image.dim(4)}).to_f32()));
    return std::pair{packed, g.read_tensor("packed")};  // [(h/16) * (w/16), 64]
  });
  metric(fmt::format("golden.{}.vae_encoder.worst_nmse", dtype_name(GetParam())), worst);
}

TEST_P(CudaGolden, TextEncoder) {
  SKIP_WITHOUT_GPU();
  const DType act = GetParam();
  auto be = make_backend(act);
  WeightStore store = WeightStore::open(test::golden_weights());
  QwenTextEncoder te(*be, store.component("text_encoder"));
  h5::File f = h5::File::open_read(test::golden("text_encoder.h5"));
  h5::Group prompts = f.root().open_group("prompts");
  const int64_t drop = f.root().attr_int("drop_idx");
  double worst = 0;
  for (const auto& name : prompts.members()) {
    h5::Group g = prompts.open_group(name);
    Tensor ids_t = g.read_tensor("input_ids");
    std::vector<int64_t> ids(ids_t.data<int64_t>(), ids_t.data<int64_t>() + ids_t.numel());
    const int64_t L = static_cast<int64_t>(ids.size());
    Tensor out = be->to_host_f32(te.encode(ids));
    const double err = test::nmse(out.slice0(drop, L), g.read_tensor("prompt_embeds"));
    worst = std::max(worst, err);
    EXPECT_LE(err, component_bound(act)) << "prompt " << name;
  }
  metric(fmt::format("golden.{}.text_encoder.worst_nmse", dtype_name(act)), worst);
}

TEST_P(CudaGolden, WholePipeline) {
  SKIP_WITHOUT_GPU();
  const DType act = GetParam();
  auto be = make_backend(act);
  Log log(0, 1, "warn");
  WeightStore weights = WeightStore::open(test::golden_weights());
  QwenImagePipeline pipeline(*be, weights, log);
  h5::File f = h5::File::open_read(test::golden("pipeline.h5"));
  double worst_nmse = 0, worst_psnr = 1e9;
  for (int index = 0; index < 12; ++index) {
    h5::Group g = f.root().open_group("cases").open_group(fmt::format("{:02d}", index));
    ImageJob job = test::golden_pipeline_job(g);
    SCOPED_TRACE(fmt::format("case {:02d}: {}x{} cfg {}", index, job.width, job.height, job.true_cfg));
    PromptEmbedding prompt = pipeline.encode_prompt(job.prompt);
    std::optional<PromptEmbedding> negative;
    if (job.true_cfg) negative = pipeline.encode_prompt(job.negative_prompt);
    StageTimes times;
    GeneratedImage image = pipeline.generate(job, prompt, negative ? &*negative : nullptr, nullptr, times);
    ASSERT_TRUE(image.ok) << image.error;
    const double err = test::nmse(image.latents, squeeze0(g.read_tensor("final_latents")));
    Tensor expected = g.read_tensor("image_uint8");
    ASSERT_EQ(static_cast<int64_t>(image.pixels.size()), expected.numel());
    const double psnr = test::rgb_agreement(image.pixels.data(), expected.numel(), expected).psnr_db;
    worst_nmse = std::max(worst_nmse, err);
    worst_psnr = std::min(worst_psnr, psnr);
    EXPECT_LE(err, act == DType::F32 ? 1e-7 : 1e-3) << "final latents";
    EXPECT_GE(psnr, act == DType::F32 ? 50.0 : 30.0) << "image PSNR (dB) against diffusers' uint8 image";
  }
  metric(fmt::format("golden.{}.pipeline.worst_latents_nmse", dtype_name(act)), worst_nmse);
  metric(fmt::format("golden.{}.pipeline.worst_image_psnr_db", dtype_name(act)), worst_psnr);
}

// ---- Qwen-Image-2.1: its tiny models from the golden files' weights (tools/golden, *_21) ----

namespace {

Config config_attr(const h5::File& f, const char* where) { return Config::parse(f.root().attr_string("config_json"), where); }

}  // namespace

TEST_P(CudaGolden, TextEncoder21) {
  SKIP_WITHOUT_GPU();
  const DType act = GetParam();
  auto be = make_backend(act);
  h5::File f = h5::File::open_read(test::golden("text_encoder_21.h5"));
  QwenTextEncoder te(*be, TextEncoderConfig::from(config_attr(f, "text_encoder_21.h5")),
                     test::GoldenWeights(f.root().open_group("weights"), "model.language_model."));
  const int64_t drop = f.root().attr_int("drop_idx");
  double worst = 0;
  h5::Group prompts = f.root().open_group("prompts");
  for (const auto& name : prompts.members()) {
    h5::Group g = prompts.open_group(name);
    const Tensor ids_t = g.read_tensor("input_ids");
    const std::vector<int64_t> ids(ids_t.data<int64_t>(), ids_t.data<int64_t>() + ids_t.numel());
    const Tensor out = be->to_host_f32(te.encode(ids, nullptr, QwenTextEncoder::Output::BeforeFinalNorm));
    const double err = test::nmse(out.slice0(drop, std::ssize(ids)), g.read_tensor("prompt_embeds"));
    worst = std::max(worst, err);
    EXPECT_LE(err, component_bound(act)) << "prompt " << name;
  }
  metric(fmt::format("golden.{}.text_encoder_21.worst_nmse", dtype_name(act)), worst);
}

TEST_P(CudaGolden, Transformer21) {
  SKIP_WITHOUT_GPU();
  const DType act = GetParam();
  auto be = make_backend(act);
  h5::File f = h5::File::open_read(test::golden("transformer_21.h5"));
  QwenImage21Transformer model(*be, Transformer21Config::from(config_attr(f, "transformer_21.h5")),
                               test::GoldenWeights(f.root().open_group("weights")));
  double worst = 0;
  h5::Group cases = f.root().open_group("cases");
  for (const auto& name : cases.members()) {
    h5::Group g = cases.open_group(name);
    const int64_t h = g.attr_int("height"), w = g.attr_int("width"), L = g.attr_int("text_tokens");
    const Tensor text = be->upload(g.read_tensor("encoder_hidden_states"), DType::F32);
    Transformer21Cache cache;
    const Tensor first = be->to_host_f32(model.forward(be->upload(g.read_tensor("latents_extract"), DType::F32), &text,
                                                       static_cast<float>(g.attr_double("timestep_extract")), h, w,
                                                       cache));
    const Tensor later = be->to_host_f32(model.forward(be->upload(g.read_tensor("latents_cached"), DType::F32), nullptr,
                                                       static_cast<float>(g.attr_double("timestep_cached")), h, w,
                                                       cache));
    for (const double err : {test::nmse(first, g.read_tensor("output_extract").slice0(L, L + h * w)),
                             test::nmse(later, g.read_tensor("output_cached"))}) {
      worst = std::max(worst, err);
      EXPECT_LE(err, component_bound(act)) << "case " << name;
    }
  }
  metric(fmt::format("golden.{}.transformer_21.worst_nmse", dtype_name(act)), worst);
}

TEST_P(CudaGolden, Vae21) {
  SKIP_WITHOUT_GPU();
  const DType act = GetParam();
  auto be = make_backend(act);
  h5::File f = h5::File::open_read(test::golden("vae_21.h5"));
  QwenImage21VaeDecoder vae(*be, Vae21Config::from(config_attr(f, "vae_21.h5")),
                            test::GoldenWeights(f.root().open_group("weights")));
  CpuBackend cpu;
  double worst = 0;
  h5::Group cases = f.root().open_group("cases");
  for (const auto& name : cases.members()) {
    h5::Group g = cases.open_group(name);
    const int64_t h = g.attr_int("height"), w = g.attr_int("width");
    const Tensor image =
        be->to_host_f32(vae.decode_latents(be->upload(g.read_tensor("packed_latents"), DType::F32), h, w));
    const double err = test::nmse(image, cpu.permute(g.read_tensor("image"), {1, 2, 0}));  // [4, H, W] -> NHWC
    worst = std::max(worst, err);
    EXPECT_LE(err, component_bound(act)) << "case " << name;
  }
  metric(fmt::format("golden.{}.vae_21.worst_nmse", dtype_name(act)), worst);
}

// The vision tower: windows as per-segment attention on row views, RoPE, the exact GELU, the
// gather back to raster order.
TEST_P(CudaGolden, VisionTower) {
  SKIP_WITHOUT_GPU();
  const DType act = GetParam();
  auto be = make_backend(act);
  h5::File f = h5::File::open_read(test::golden("vision.h5"));
  const nlohmann::json vision = nlohmann::json::parse(f.root().attr_string("config_json"));
  QwenVisionTower tower(*be, VisionConfig::from(Config(nlohmann::json{{"vision_config", vision}}, "vision.h5")),
                        test::GoldenWeights(f.root().open_group("weights"), QwenVisionTower::kTensorPrefix));
  double worst = 0;
  h5::Group cases = f.root().open_group("cases");
  for (const auto& name : cases.members()) {
    h5::Group g = cases.open_group(name);
    const Tensor grid_thw = g.read_tensor("grid_thw");
    std::vector<ImageGrid> grids;
    for (int64_t i = 0; i < grid_thw.dim(0); ++i)
      grids.push_back({grid_thw.data<int64_t>()[3 * i], grid_thw.data<int64_t>()[3 * i + 1],
                       grid_thw.data<int64_t>()[3 * i + 2]});
    const Tensor out = be->to_host_f32(tower.forward(g.read_tensor("pixel_values"), grids));
    const double err = test::nmse(out, g.read_tensor("output"));
    worst = std::max(worst, err);
    EXPECT_LE(err, component_bound(act)) << "case " << name;
  }
  metric(fmt::format("golden.{}.vision.worst_nmse", dtype_name(act)), worst);
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaGolden, ::testing::Values(DType::F32, DType::BF16), mode_name);

#endif  // DITBATCH_HAVE_CUDA
