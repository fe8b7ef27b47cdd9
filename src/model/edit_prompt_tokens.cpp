#include "model/edit_prompt_tokens.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "model/prompt_tokens.h"
#include "model/qwen_image_edit_constants.h"

namespace ditbatch {

std::string edit_prompt_text(EditPipeline pipeline, std::string_view prompt, size_t num_images) {
  if (pipeline == EditPipeline::Edit) return apply_prompt_template(kQwenImageEditPromptTemplate, prompt);
  std::string pictures;  // base_img_prompt: pictures numbered from 1
  for (size_t k = 1; k <= num_images; ++k) pictures += apply_prompt_template(kQwenImageEditPlusPicturePrompt, std::to_string(k));
  return apply_prompt_template(kQwenImageEditPlusPromptTemplate, pictures + std::string(prompt));
}

namespace {

// image_grid_thw (patches) -> the language model's grid of one image: (t, h / merge, w / merge).
ImageTokenSpan image_tokens(const std::array<int64_t, 3>& thw, int64_t merge_size, size_t index) {
  const auto [t, h, w] = thw;
  constexpr int64_t kMaxGrid = int64_t{1} << 20;  // far past any image the processor makes; no overflow below
  if (t < 1 || h < 1 || w < 1 || t > kMaxGrid || h > kMaxGrid || w > kMaxGrid || h % merge_size != 0 ||
      w % merge_size != 0)
    fail_input("image {}: image_grid_thw ({}, {}, {}) is not a grid of whole {}x{} merge blocks", index, t, h, w,
               merge_size, merge_size);
  return ImageTokenSpan{0, t, h / merge_size, w / merge_size};
}

}  // namespace

EditPromptTokens tokenize_edit_prompt(Tokenizer& tokenizer, EditPipeline pipeline, std::string_view prompt,
                                      const std::vector<std::array<int64_t, 3>>& grid_thw, int64_t merge_size,
                                      int64_t max_sequence_length) {
  if (max_sequence_length < 1 || max_sequence_length > kQwenImageTokenizerMaxLength)
    fail_input("max_sequence_length {}: must be 1..{}, as diffusers allows", max_sequence_length,
               kQwenImageTokenizerMaxLength);
  if (merge_size < 1) fail_input("spatial_merge_size {}: must be >= 1", merge_size);
  if (grid_thw.empty() || (pipeline == EditPipeline::Edit && grid_thw.size() != 1))
    fail_input("{} images: {} takes {}", grid_thw.size(),
               pipeline == EditPipeline::Edit ? "Qwen-Image-Edit" : "Qwen-Image-Edit-Plus",
               pipeline == EditPipeline::Edit ? "exactly one" : "one or more");
  const int64_t pad_id = tokenizer.token_id(kImagePadToken);
  if (pad_id < 0) fail_input("{}: the tokenizer has no {} token", tokenizer.source(), kImagePadToken);

  const std::vector<int64_t> template_ids = tokenizer.encode(edit_prompt_text(pipeline, prompt, grid_thw.size()));
  const auto pads = static_cast<size_t>(std::count(template_ids.begin(), template_ids.end(), pad_id));
  if (pads != grid_thw.size())
    fail_input("the templated prompt holds {} {} tokens for {} images: a prompt may not contain {} itself", pads,
               kImagePadToken, grid_thw.size(), kImagePadToken);

  // The processor's expansion: the k-th pad becomes image k's count of pads.
  EditPromptTokens tokens;
  for (const int64_t id : template_ids) {
    if (id != pad_id) {
      tokens.ids.push_back(id);
      continue;
    }
    const size_t k = tokens.images.size();
    ImageTokenSpan image = image_tokens(grid_thw[k], merge_size, k);
    image.first = static_cast<int64_t>(tokens.ids.size());
    tokens.ids.insert(tokens.ids.end(), static_cast<size_t>(image.count()), pad_id);
    tokens.images.push_back(image);
  }
  const auto n = static_cast<int64_t>(tokens.ids.size());
  if (n <= kQwenImageEditDropIdx)
    fail_input("the templated prompt has {} tokens, not more than the {} the template drops", n, kQwenImageEditDropIdx);
  tokens.keep_first = kQwenImageEditDropIdx;
  tokens.keep_count = n - kQwenImageEditDropIdx;
  return tokens;
}

}  // namespace ditbatch
