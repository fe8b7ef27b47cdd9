#include "model/prompt_tokens.h"

#include <algorithm>

#include "core/error.h"
#include "io/weight_store.h"

namespace ditbatch {

PromptTemplate PromptTemplate::from_weights(const WeightStore& store) {
  const bool has_text = store.root().has_attr("prompt_template");
  const bool has_drop = store.root().has_attr("prompt_template_encode_start_idx");
  if (!has_text && !has_drop) return PromptTemplate{};
  // One without the other cannot be right: the drop index counts the template's own tokens.
  if (has_text != has_drop)
    fail_input("{}: root attribute {} is present but {} is missing; they must come together", store.path(),
               has_text ? "prompt_template" : "prompt_template_encode_start_idx",
               has_text ? "prompt_template_encode_start_idx" : "prompt_template");
  PromptTemplate tmpl;
  tmpl.text = store.root_string("prompt_template");
  tmpl.drop_idx = store.root_int("prompt_template_encode_start_idx");
  if (tmpl.drop_idx < 0)
    fail_input("{}: prompt_template_encode_start_idx is {}, expected >= 0", store.path(), tmpl.drop_idx);
  apply_prompt_template(tmpl.text, "");  // a malformed template fails now, not at the first prompt
  return tmpl;
}

std::string apply_prompt_template(std::string_view prompt_template, std::string_view prompt) {
  std::string out;
  out.reserve(prompt_template.size() + prompt.size());
  int fields = 0;
  size_t i = 0;
  while (i < prompt_template.size()) {
    const size_t brace = prompt_template.find_first_of("{}", i);
    out.append(prompt_template.substr(i, brace == std::string_view::npos ? std::string_view::npos : brace - i));
    if (brace == std::string_view::npos) break;
    const std::string_view rest = prompt_template.substr(brace);
    if (rest.starts_with("{{") || rest.starts_with("}}")) {
      out += rest[0];
      i = brace + 2;
    } else if (rest.starts_with("{}") || rest.starts_with("{0}")) {
      out += prompt;
      i = brace + (rest.starts_with("{}") ? 2 : 3);
      ++fields;
    } else {
      fail_input(
          "prompt template: '{}' at character {} is not part of \"{{}}\", \"{{{{\" or \"}}}}\" (template: \"{}\")",
          rest[0], brace, prompt_template);
    }
  }
  if (fields != 1)
    fail_input("prompt template has {} \"{{}}\" fields, expected exactly one (template: \"{}\")", fields,
               prompt_template);
  return out;
}

PromptTokens tokenize_prompt(Tokenizer& tokenizer, std::string_view prompt, std::string_view prompt_template,
                             int64_t drop_idx, int64_t max_sequence_length) {
  if (max_sequence_length < 1 || max_sequence_length > kQwenImageTokenizerMaxLength)
    fail_input("max_sequence_length {}: must be 1..{}, as diffusers allows", max_sequence_length,
               kQwenImageTokenizerMaxLength);
  if (drop_idx < 0) fail_input("prompt template drop index {}: must be >= 0", drop_idx);
  PromptTokens tokens;
  tokens.ids = tokenizer.encode(apply_prompt_template(prompt_template, prompt));
  tokens.uncut_count = static_cast<int64_t>(tokens.ids.size());
  // The pipeline's tokenizer call: max_length = tokenizer_max_length + drop_idx, truncation from the right.
  const auto max_length = static_cast<size_t>(kQwenImageTokenizerMaxLength + drop_idx);
  if (tokens.ids.size() > max_length) tokens.ids.resize(max_length);
  const auto n = static_cast<int64_t>(tokens.ids.size());
  if (n <= drop_idx)
    fail_input("the templated prompt has {} tokens, not more than the {} the template drops (template: \"{}\")", n,
               drop_idx, prompt_template);
  tokens.keep_first = drop_idx;
  tokens.keep_count = std::min(n - drop_idx, max_sequence_length);
  return tokens;
}

}  // namespace ditbatch
