// Pipeline constants that diffusers hard-codes in QwenImagePipeline (not in any config.json).
// `ditbatch convert` and `make-tiny` store them in the weight file's root attributes; the
// pipeline reads them from there, so a future model variant can carry its own.
#pragma once

namespace ditbatch {

// The chat template wrapped around every prompt; "{}" is replaced by the prompt.
inline constexpr const char* kQwenImagePromptTemplate =
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "
    "spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n"
    "<|im_start|>assistant\n";
// Tokens of the template prefix dropped from the encoder output (prompt_template_encode_start_idx).
inline constexpr int kQwenImageDropIdx = 34;
// diffusers' tokenizer_max_length: the templated prompt is cut to this + kQwenImageDropIdx tokens.
inline constexpr int kQwenImageTokenizerMaxLength = 1024;
inline constexpr int kDefaultMaxSequenceLength = 512;

}  // namespace ditbatch
