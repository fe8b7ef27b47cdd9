// Qwen-Image-2.1's transformer (a tiny QwenImage21Transformer2DModel) on the CPU backend against
// diffusers, as its pipeline drives it for text-to-image (tools/golden, stage transformer_21):
// step 0 over [text | image] with the block-causal attention, filling the text's K/V cache,
// then a later step of the image rows alone reading it; every block's output and the velocity.
// The weights are in the golden file.
#include <gtest/gtest.h>

#include "cpu/cpu_backend.h"
#include "golden.h"
#include "io/config.h"
#include "io/h5.h"
#include "model/qwen_image_21/transformer.h"

using namespace ditbatch;

namespace {

constexpr double kNmseBound = 1e-10;

// The golden file's model, with every tensor of the file bound (checked).
QwenImage21Transformer golden_model(Backend& be, const h5::File& f) {
  const Transformer21Config config =
      Transformer21Config::from(Config::parse(f.root().attr_string("config_json"), "transformer_21.h5"));
  test::GoldenWeights weights(f.root().open_group("weights"));
  QwenImage21Transformer model(be, config, weights);
  EXPECT_EQ(weights.bound, f.root().open_group("weights").members().size()) << "a tensor of the file was not bound";
  return model;
}

}  // namespace

TEST(Transformer21Golden, AFirstStepFillsTheTextCacheAndALaterStepReadsIt) {
  CpuBackend be;
  h5::File f = h5::File::open_read(test::golden("transformer_21.h5"));
  QwenImage21Transformer model = golden_model(be, f);
  const Transformer21Config& config = model.config();
  const int64_t D = config.inner_dim();
  h5::Group cases = f.root().open_group("cases");
  int checked = 0;
  for (const auto& name : cases.members()) {
    SCOPED_TRACE("case " + name);
    h5::Group g = cases.open_group(name);
    const int64_t h = g.attr_int("height"), w = g.attr_int("width"), L = g.attr_int("text_tokens"), S = h * w;
    const Tensor text = g.read_tensor("encoder_hidden_states");
    Transformer21Cache cache;
    // Step 0: every block's output over [text | image] rows, and the image rows' velocity.
    const Tensor blocks0 = g.read_tensor("blocks_extract");  // [layers, L + S, D]
    int hooks = 0;
    const Tensor v0 = model.forward(g.read_tensor("latents_extract"), &text,
                                    static_cast<float>(g.attr_double("timestep_extract")), h, w, cache,
                                    [&](int64_t k, const Tensor& x) {
                                      EXPECT_LE(test::nmse(be.to_host_f32(x), blocks0.slice0(k, k + 1).view({L + S, D})),
                                                kNmseBound)
                                          << "block " << k << " of step 0";
                                      ++hooks;
                                    });
    EXPECT_EQ(hooks, config.num_layers);
    EXPECT_LE(test::nmse(be.to_host_f32(v0), g.read_tensor("output_extract").slice0(L, L + S)), kNmseBound);
    EXPECT_TRUE(cache.filled());
    EXPECT_EQ(cache.text_tokens, L);
    // A later step: the image rows alone, over the cached text keys and values.
    const Tensor blocks1 = g.read_tensor("blocks_cached");  // [layers, S, D]
    const Tensor v1 = model.forward(g.read_tensor("latents_cached"), nullptr,
                                    static_cast<float>(g.attr_double("timestep_cached")), h, w, cache,
                                    [&](int64_t k, const Tensor& x) {
                                      EXPECT_LE(test::nmse(be.to_host_f32(x), blocks1.slice0(k, k + 1).view({S, D})),
                                                kNmseBound)
                                          << "block " << k << " of the cached step";
                                    });
    EXPECT_LE(test::nmse(be.to_host_f32(v1), g.read_tensor("output_cached")), kNmseBound);
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

// A cached step needs the first step's cache, of the same size.
TEST(Transformer21Golden, ACachedStepWithoutItsFirstStepIsRefused) {
  CpuBackend be;
  h5::File f = h5::File::open_read(test::golden("transformer_21.h5"));
  QwenImage21Transformer model = golden_model(be, f);
  Transformer21Cache cache;
  const Tensor latents = test::random_tensor({8, model.config().in_channels}, 7);
  EXPECT_THROW(model.forward(latents, nullptr, 0.5f, 2, 4, cache), Error);
}
