// The VAE encoder on the CPU backend against diffusers (tests/data/golden/vae_encoder.h5): the
// tiny encoder of the golden pipeline at three image sizes, stage by stage, then the normalised
// posterior mode and its packed tokens as QwenImageEditPipeline._encode_vae_image and
// _pack_latents compute them.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "golden.h"
#include "io/h5.h"
#include "io/safetensors.h"
#include "model/vae_encoder.h"

using namespace ditbatch;
using test::nchw_to_nhwc;

namespace {

// A golden stage [C, h, w] (batch and frame axes dropped) as NHWC [h, w, C].
Tensor chw_to_nhwc(const Tensor& t) {
  return nchw_to_nhwc(t.view({1, t.dim(0), 1, t.dim(1), t.dim(2)}));
}

void expect_matches(const Tensor& got, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(got.shape(), expected.shape()) << what;
  EXPECT_LE(test::nmse(got, expected), 1e-10) << what;
  EXPECT_LT(test::max_abs_diff(got, expected), 1e-4) << what;
}

}  // namespace

TEST(VaeEncoderGolden, TinyEncoderStageByStageAtThreeSizes) {
  CpuBackend be;
  VaeEncoder vae(be, test::golden_store().component("vae"));
  ASSERT_EQ(vae.down_block_count(), 11u);  // 3 levels of (2 resnets + resample), 2 resnets
  h5::File f = h5::File::open_read(test::golden("vae_encoder.h5"));
  h5::Group cases = f.root().open_group("cases");
  int checked = 0;
  for (const auto& name : cases.members()) {
    SCOPED_TRACE("case " + name);
    h5::Group g = cases.open_group(name);
    const Tensor image5d = g.read_tensor("image");  // [1, 3, 1, h, w]
    const int64_t h = image5d.dim(3), w = image5d.dim(4);
    const Tensor image = image5d.view({3, h, w}).to_f32();
    // Each stage from our own previous one: an error anywhere carries to the end.
    Tensor x = vae.run_conv_in(vae.upload_image(image));
    expect_matches(be.to_host_f32(x), chw_to_nhwc(g.read_tensor("conv_in")), "conv_in");
    for (size_t j = 0; j < vae.down_block_count(); ++j) {
      x = vae.run_down_block(j, x);
      const std::string stage = fmt::format("down_block_{}", j);
      expect_matches(be.to_host_f32(x), chw_to_nhwc(g.read_tensor(stage)), stage);
    }
    x = vae.run_mid_block(x);
    expect_matches(be.to_host_f32(x), chw_to_nhwc(g.read_tensor("mid_block")), "mid_block");
    x = vae.run_head(x);
    expect_matches(be.to_host_f32(x), chw_to_nhwc(g.read_tensor("encoder_out")), "encoder_out");
    expect_matches(be.to_host_f32(vae.moments(x)), chw_to_nhwc(g.read_tensor("moments")), "moments");

    const Tensor latents = be.to_host_f32(vae.encode(image));  // [h/8, w/8, 16]
    ASSERT_EQ(latents.shape(), (Shape{h / 8, w / 8, 16}));
    expect_matches(latents, chw_to_nhwc(g.read_tensor("normalized")), "normalized latents");
    const Tensor packed = be.to_host_f32(vae.encode_packed(image));
    ASSERT_EQ(packed.shape(), (Shape{(h / 16) * (w / 16), 64}));
    expect_matches(packed, g.read_tensor("packed"), "packed tokens");
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

// The latents are the mean normalised, (mean - latents_mean) / latents_std, not the raw mean.
TEST(VaeEncoderGolden, NormalisesTheMeanByTrueDivision) {
  CpuBackend be;
  VaeEncoder vae(be, test::golden_store().component("vae"));
  const VaeConfig& c = vae.config();
  h5::Group g = h5::File::open_read(test::golden("vae_encoder.h5")).root().open_group("cases").open_group("01");
  const Tensor mean = chw_to_nhwc(g.read_tensor("mean"));  // [6, 10, 16], diffusers' posterior mode
  const Tensor image5d = g.read_tensor("image");
  const Tensor latents = be.to_host_f32(vae.encode(image5d.view({3, image5d.dim(3), image5d.dim(4)}).to_f32()));
  ASSERT_EQ(latents.shape(), mean.shape());
  Tensor expected = Tensor::host(mean.shape());
  for (int64_t i = 0; i < mean.numel(); ++i) {
    const size_t ch = static_cast<size_t>(i % 16);
    expected.data<float>()[i] = (mean.data<float>()[i] - c.latents_mean[ch]) / c.latents_std[ch];
  }
  expect_matches(latents, expected, "normalised from the golden mean");
  EXPECT_GT(test::nmse(latents, mean), 0.1) << "the latents must not be the raw mean";
}

// The encoder's weight list is exactly the file's encoder.* and quant_conv.* tensors (the list
// convert checks and make-tiny writes for the Edit families).
TEST(VaeEncoderGolden, WeightSpecsAreTheFilesEncoderTensors) {
  const SafetensorsSet file = SafetensorsSet::open_dir(test::golden("tiny-pipeline/vae"));
  std::map<std::string, Shape> in_file;
  for (const auto& item : file.items())
    if (item.entry->name.starts_with("encoder.") || item.entry->name.starts_with("quant_conv."))
      in_file[item.entry->name] = item.entry->shape;
  const VaeConfig config = VaeConfig::from(test::golden_store().component("vae").config());
  std::map<std::string, Shape> specs;
  for (const WeightSpec& s : VaeEncoder::weight_specs(config))
    EXPECT_TRUE(specs.emplace(s.name, s.shape).second) << s.name;
  EXPECT_EQ(in_file.size(), 86u);  // what diffusers saves for the tiny VAE's encoder
  EXPECT_EQ(specs, in_file);
}

TEST(VaeEncoderGolden, RefusesImagesItCannotEncode) {
  CpuBackend be;
  VaeEncoder vae(be, test::golden_store().component("vae"));
  const Tensor not_multiple_of_8 = test::random_tensor({3, 20, 16}, 5);
  EXPECT_THROW(vae.encode(not_multiple_of_8), Error);
  const Tensor four_channels = test::random_tensor({4, 16, 16}, 6);
  EXPECT_THROW(vae.encode(four_channels), Error);
  // 24 x 16 encodes (latents 3 x 2) but cannot pack into 2x2 patches.
  const Tensor odd_latent_rows = test::random_tensor({3, 24, 16}, 7);
  EXPECT_EQ(be.to_host_f32(vae.encode(odd_latent_rows)).shape(), (Shape{3, 2, 16}));
  EXPECT_THROW(vae.encode_packed(odd_latent_rows), Error);
}
