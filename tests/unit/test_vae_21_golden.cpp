// Qwen-Image-2.1's VAE decoder (a tiny AutoencoderKLQwenImage21) on the CPU backend against
// diffusers, as its pipeline decodes (tools/golden, stage vae_21): the packed latents
// de-normalised z * std + mean, the mid block and every up block (the DupUp3D shortcuts: each
// level's channel map), and the clamped 4-channel image. The weights are in the golden file.
#include <gtest/gtest.h>

#include "cpu/cpu_backend.h"
#include "golden.h"
#include "io/config.h"
#include "io/h5.h"
#include "model/qwen_image_21/vae.h"

using namespace ditbatch;

namespace {

// [C, H, W] (diffusers' layout, one image, one frame) -> NHWC [H, W, C].
Tensor chw_to_hwc(const Tensor& t) { return CpuBackend().permute(t.to_f32(), {1, 2, 0}); }

}  // namespace

TEST(Vae21Golden, DenormalisesAndDecodesEveryLevelAsDiffusers) {
  CpuBackend be;
  h5::File f = h5::File::open_read(test::golden("vae_21.h5"));
  const Vae21Config config = Vae21Config::from(Config::parse(f.root().attr_string("config_json"), "vae_21.h5"));
  EXPECT_EQ(config.decoder_dims(), (std::vector<int64_t>{32, 32, 32, 16, 8, 4}));
  EXPECT_EQ(config.spatial_scale(), 16);
  test::GoldenWeights weights(f.root().open_group("weights"));
  QwenImage21VaeDecoder vae(be, config, weights);
  EXPECT_EQ(weights.bound, f.root().open_group("weights").members().size() - 6)
      << "every tensor of the file but the three time_convs (weight, bias) a single frame never reaches";
  h5::Group cases = f.root().open_group("cases");
  int checked = 0;
  for (const auto& name : cases.members()) {
    SCOPED_TRACE("case " + name);
    h5::Group g = cases.open_group(name);
    const int64_t h = g.attr_int("height"), w = g.attr_int("width");
    const Tensor z = vae.denormalized_latents(be.upload(g.read_tensor("packed_latents"), DType::F32), h, w);
    // Two rounded ops, as diffusers: exactly its values.
    EXPECT_EQ(test::nmse(be.to_host_f32(z), chw_to_hwc(g.read_tensor("z"))), 0.0);
    int stages = 0;
    const Tensor image = vae.decode(z, [&](const std::string& stage, const Tensor& x) {
      EXPECT_LE(test::nmse(be.to_host_f32(x), chw_to_hwc(g.read_tensor(stage))), 1e-10) << stage;
      ++stages;
    });
    EXPECT_EQ(stages, 6);
    const Tensor expected = chw_to_hwc(g.read_tensor("image"));
    EXPECT_EQ(image.shape(), expected.shape());
    EXPECT_LE(test::nmse(be.to_host_f32(image), expected), 1e-10);
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}
