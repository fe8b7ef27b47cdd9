// What QwenImage21Pipeline fixes in code rather than in its folder: spec qwen-image-2.1.md §3.2.
#pragma once

#include <string_view>

namespace ditbatch {

// The text-to-image template, a raw string ("{}" marks the prompt), not the chat template.
inline constexpr const char* kQwenImage21PromptTemplate =
    "<|im_start|>system\nComprehend and analyze the provided prompt.<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n"
    "<|im_start|>assistant\n";
// The pipeline drops the tokens of the system turn alone (as its processor's chat template
// renders it: this prefix of the template), 14 with the real tokenizer.
inline std::string_view qwen_image_21_system_turn() {
  const std::string_view t = kQwenImage21PromptTemplate;
  return t.substr(0, t.find("<|im_start|>user"));
}

}  // namespace ditbatch
