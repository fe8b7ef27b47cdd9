// Prompt constants that diffusers hard-codes in QwenImageEditPipeline and
// QwenImageEditPlusPipeline (spec qwen-image-edit.md §3), and the Qwen2.5-VL special tokens their
// templates use. Both templates share the system prompt; only the user turn differs.
#pragma once

#include <cstdint>

namespace ditbatch {

// QwenImageEditPipeline.prompt_template_encode: one image's tokens in front of the prompt ("{}").
inline constexpr const char* kQwenImageEditPromptTemplate =
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, objects, "
    "background), then explain how the user's text instruction should alter or modify the image. Generate a new "
    "image that meets the user's requirements while maintaining consistency with the original input where "
    "appropriate.<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>{}<|im_end|>\n"
    "<|im_start|>assistant\n";
// QwenImageEditPlusPipeline.prompt_template_encode: "{}" gets every image's picture prompt, then the prompt.
inline constexpr const char* kQwenImageEditPlusPromptTemplate =
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, objects, "
    "background), then explain how the user's text instruction should alter or modify the image. Generate a new "
    "image that meets the user's requirements while maintaining consistency with the original input where "
    "appropriate.<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n";
// Edit-Plus's img_prompt_template: image k (from 1) as "Picture k: " and its tokens, no separator.
inline constexpr const char* kQwenImageEditPlusPicturePrompt = "Picture {}: <|vision_start|><|image_pad|><|vision_end|>";
// prompt_template_encode_start_idx of both: the system turn and "<|im_start|>user\n".
inline constexpr int kQwenImageEditDropIdx = 64;

// The token the Qwen2-VL processor repeats once per merged patch of an image, and the real
// tokenizer's ids of it and its brackets (a tiny test tokenizer numbers them otherwise: look the
// id up in the tokenizer, or read image_token_id from the text encoder's config).
inline constexpr const char* kImagePadToken = "<|image_pad|>";
inline constexpr int64_t kQwen25VLImageTokenId = 151655;
inline constexpr int64_t kQwen25VLVisionStartTokenId = 151652;
inline constexpr int64_t kQwen25VLVisionEndTokenId = 151653;

}  // namespace ditbatch
