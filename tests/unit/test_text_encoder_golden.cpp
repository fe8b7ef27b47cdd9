// The Qwen2.5-VL text encoder (tiny) on the CPU backend against transformers: every layer's
// hidden states, the final prompt_embeds, and a padded batch run one prompt at a time.
#include <gtest/gtest.h>

#include "cpu/cpu_backend.h"
#include "golden.h"
#include "io/h5.h"
#include "model/text_encoder.h"

using namespace ditbatch;

namespace {

std::vector<int64_t> ids_of(const Tensor& t) { return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel()); }

constexpr double kNmseBound = 1e-10;

}  // namespace

TEST(TextEncoderGolden, HiddenStatesOfEveryLayer) {
  CpuBackend be;
  WeightStore store = WeightStore::open(test::golden_weights());
  QwenTextEncoder te(be, store.component("text_encoder"));
  EXPECT_EQ(te.config().vocab_size, 4278);
  EXPECT_EQ(te.config().head_dim, 16);
  EXPECT_EQ(te.config().rope_theta, 1e6);  // from rope_parameters (transformers 5 layout)
  h5::File f = h5::File::open_read(test::golden("text_encoder.h5"));
  h5::Group prompts = f.root().open_group("prompts");
  const int64_t drop = f.root().attr_int("drop_idx");
  int checked = 0;
  for (const auto& name : prompts.members()) {
    SCOPED_TRACE("prompt " + name);
    h5::Group g = prompts.open_group(name);
    std::vector<int64_t> ids = ids_of(g.read_tensor("input_ids"));
    Tensor hidden = g.read_tensor("hidden_states");  // [layers + 1, L, 64]
    const int64_t L = static_cast<int64_t>(ids.size());
    int hooks = 0;
    Tensor out = te.encode(ids, [&](int64_t k, const Tensor& h) {
      EXPECT_LE(test::nmse(h, hidden.slice0(k, k + 1).view({L, 64})), kNmseBound) << "hidden_states[" << k << "]";
      ++hooks;
    });
    EXPECT_EQ(hooks, 3);
    Tensor embeds = g.read_tensor("prompt_embeds");
    EXPECT_LE(test::nmse(be.to_host_f32(out).slice0(drop, L), embeds), kNmseBound);
    ++checked;
  }
  EXPECT_EQ(checked, 7);
}

TEST(TextEncoderGolden, PaddedBatchEqualsPromptsRunAlone) {
  CpuBackend be;
  WeightStore store = WeightStore::open(test::golden_weights());
  QwenTextEncoder te(be, store.component("text_encoder"));
  h5::File f = h5::File::open_read(test::golden("text_encoder.h5"));
  h5::Group g = f.root().open_group("batch");
  Tensor ids = g.read_tensor("input_ids"), mask = g.read_tensor("attention_mask");
  Tensor embeds = g.read_tensor("prompt_embeds"), embeds_mask = g.read_tensor("prompt_embeds_mask");
  const int64_t B = ids.dim(0), L = ids.dim(1), S = embeds.dim(1), drop = f.root().attr_int("drop_idx");
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> valid;
    for (int64_t j = 0; j < L; ++j)
      if (mask.data<int64_t>()[b * L + j]) valid.push_back(ids.data<int64_t>()[b * L + j]);
    Tensor out = be.to_host_f32(te.encode(valid));
    const int64_t kept = static_cast<int64_t>(valid.size()) - drop;
    Tensor row = embeds.slice0(b, b + 1).view({S, 64});
    EXPECT_LE(test::nmse(out.slice0(drop, drop + kept), row.slice0(0, kept)), kNmseBound) << "row " << b;
    for (int64_t j = 0; j < S; ++j) EXPECT_EQ(embeds_mask.data<int64_t>()[b * S + j], j < kept ? 1 : 0);
  }
}
