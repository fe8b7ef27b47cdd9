// The token ids QwenImagePipeline feeds its text encoder, and which encoder rows it keeps:
// spec text-encoder.md §5 (_get_qwen_prompt_embeds + encode_prompt).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/qwen_image_constants.h"
#include "model/tokenizer.h"

namespace ditbatch {

class WeightStore;

// The chat template wrapped around every prompt and the number of its leading tokens that
// diffusers drops from the encoder output (prompt_template_encode_start_idx).
struct PromptTemplate {
  std::string text = kQwenImagePromptTemplate;  // "{}" marks the prompt
  int64_t drop_idx = kQwenImageDropIdx;

  // The weight file's root attributes prompt_template / prompt_template_encode_start_idx;
  // a file written before they existed gets the built-in Qwen-Image values.
  static PromptTemplate from_weights(const WeightStore& store);
};

// `prompt_template` with its one "{}" replaced by `prompt` verbatim, like Python's
// str.format(prompt): "{{" and "}}" are literal braces, "{0}" is also accepted, and any other
// field (or none, or more than one) is an InputError.
std::string apply_prompt_template(std::string_view prompt_template, std::string_view prompt);

struct PromptTokens {
  // The whole templated prompt tokenized in one go (never prefix + prompt + suffix stitched:
  // a prompt's leading newline merges with the template's), cut to
  // kQwenImageTokenizerMaxLength + drop_idx ids as the pipeline's tokenizer call does.
  std::vector<int64_t> ids;
  // The text encoder's output rows kept as prompt_embeds: [keep_first, keep_first + keep_count),
  // that is drop_idx, then at most max_sequence_length rows.
  int64_t keep_first = 0;
  int64_t keep_count = 0;
  // The templated prompt's ids before any cut (a 10 MB prompt has millions), for messages.
  int64_t uncut_count = 0;
};

// max_sequence_length outside 1..1024 is an InputError, as in diffusers' check_inputs; so is a
// templated prompt that leaves no token after the drop.
PromptTokens tokenize_prompt(Tokenizer& tokenizer, std::string_view prompt, std::string_view prompt_template,
                             int64_t drop_idx, int64_t max_sequence_length = kDefaultMaxSequenceLength);
inline PromptTokens tokenize_prompt(Tokenizer& tokenizer, std::string_view prompt, const PromptTemplate& tmpl,
                                    int64_t max_sequence_length = kDefaultMaxSequenceLength) {
  return tokenize_prompt(tokenizer, prompt, tmpl.text, tmpl.drop_idx, max_sequence_length);
}

}  // namespace ditbatch
