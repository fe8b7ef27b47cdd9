// Qwen-Image-2.1's text encoder (a tiny Qwen3-VL language model) on the CPU backend against
// transformers, through QwenImage21Pipeline's own prompt encoding (tools/golden, stage
// text_encoder_21): every layer's hidden states, and prompt_embeds = the last layer's output
// before the final norm, from the pipeline's drop index on. The weights are in the golden file.
#include <gtest/gtest.h>

#include "cpu/cpu_backend.h"
#include "golden.h"
#include "io/config.h"
#include "io/h5.h"
#include "model/prompt_tokens.h"
#include "model/text_encoder.h"
#include "model/tokenizer.h"

using namespace ditbatch;

namespace {

constexpr double kNmseBound = 1e-10;

std::vector<int64_t> ids_of(const Tensor& t) { return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel()); }

}  // namespace

TEST(TextEncoder21Golden, HiddenStatesOfEveryLayerAndThePromptEmbedsBeforeTheFinalNorm) {
  CpuBackend be;
  h5::File f = h5::File::open_read(test::golden("text_encoder_21.h5"));
  const TextEncoderConfig config =
      TextEncoderConfig::from(Config::parse(f.root().attr_string("config_json"), "text_encoder_21.h5"));
  EXPECT_TRUE(config.qk_norm);
  EXPECT_FALSE(config.qkv_bias);
  EXPECT_FALSE(config.o_bias);
  EXPECT_EQ(config.rope_theta, 5e6);
  EXPECT_EQ(config.num_attention_heads / config.num_key_value_heads, 2);
  test::GoldenWeights weights(f.root().open_group("weights"), "model.language_model.");
  QwenTextEncoder te(be, config, weights);
  EXPECT_EQ(weights.bound, f.root().open_group("weights").members().size()) << "a tensor of the file was not bound";

  const int64_t drop = f.root().attr_int("drop_idx"), hidden = config.hidden_size;
  h5::Group prompts = f.root().open_group("prompts");
  int checked = 0;
  for (const auto& name : prompts.members()) {
    SCOPED_TRACE("prompt " + name);
    h5::Group g = prompts.open_group(name);
    const std::vector<int64_t> ids = ids_of(g.read_tensor("input_ids"));
    const Tensor expected = g.read_tensor("hidden_states");  // [layers + 1, L, hidden]
    const int64_t L = std::ssize(ids);
    int hooks = 0;
    const Tensor out = be.to_host_f32(te.encode(
        ids,
        [&](int64_t k, const Tensor& h) {
          EXPECT_LE(test::nmse(be.to_host_f32(h), expected.slice0(k, k + 1).view({L, hidden})), kNmseBound)
              << "hidden_states[" << k << "]";
          ++hooks;
        },
        QwenTextEncoder::Output::BeforeFinalNorm));
    EXPECT_EQ(hooks, config.num_hidden_layers + 1);
    const Tensor embeds = g.read_tensor("prompt_embeds");
    EXPECT_LE(test::nmse(out.slice0(drop, L), embeds), kNmseBound);
    // Qwen-Image's tap (after the norm) is far from it: the output choice is what is tested.
    EXPECT_GT(test::nmse(be.to_host_f32(te.encode(ids)).slice0(drop, L), embeds), 1e-3);
    ++checked;
  }
  EXPECT_EQ(checked, 7);
}

// The ids QwenImage21Pipeline feeds its text encoder, from the tiny tokenizer (the one the
// golden's processor wraps): its template around the prompt (an empty prompt as " "), tokenized
// whole; and the drop index it derives, the tokens of the system turn alone.
TEST(TextEncoder21Golden, TheTemplatedPromptTokenizesAsThePipelineDoes) {
  h5::File f = h5::File::open_read(test::golden("text_encoder_21.h5"));
  Tokenizer tokenizer = Tokenizer::from_folder(test::golden("tiny-pipeline/tokenizer"));
  const std::string template_text = f.root().attr_string("template");
  EXPECT_EQ(template_text,
            "<|im_start|>system\nComprehend and analyze the provided prompt.<|im_end|>\n<|im_start|>user\n{}"
            "<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(std::ssize(tokenizer.encode(
                "<|im_start|>system\nComprehend and analyze the provided prompt.<|im_end|>\n")),
            f.root().attr_int("drop_idx"));
  h5::Group prompts = f.root().open_group("prompts");
  for (const auto& name : prompts.members()) {
    h5::Group g = prompts.open_group(name);
    const std::string prompt = g.attr_string("prompt");
    EXPECT_EQ(tokenizer.encode(apply_prompt_template(template_text, prompt.empty() ? " " : prompt)),
              ids_of(g.read_tensor("input_ids")))
        << "prompt " << name << ": " << prompt;
  }
}
