// The token ids QwenImageEditPipeline and QwenImageEditPlusPipeline feed their text encoder for
// one prompt and its images, and which encoder rows they keep (spec qwen-image-edit.md §3, §6):
// the Edit or Edit-Plus template, each image's <|image_pad|> repeated once per merged patch as
// the Qwen2-VL processor does, and the drop of the template's first 64 tokens. There is no
// truncation: the image tokens and the whole prompt reach the transformer.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/qwen_image_constants.h"
#include "model/text_positions.h"
#include "model/tokenizer.h"

namespace ditbatch {

enum class EditPipeline {
  Edit,      // QwenImageEditPipeline: one image before the prompt
  EditPlus,  // QwenImageEditPlusPipeline (Edit-2509, Edit-2511): "Picture k: " and its tokens per image
};

// The text the pipeline hands the processor: its template around the prompt (Edit-Plus: around
// the picture prompts of `num_images` images followed by the prompt), one <|image_pad|> per image.
std::string edit_prompt_text(EditPipeline pipeline, std::string_view prompt, size_t num_images);

struct EditPromptTokens {
  // The templated prompt tokenized in one go, each image's pad repeated grid_t * grid_h * grid_w
  // / merge_size² times.
  std::vector<int64_t> ids;
  std::vector<ImageTokenSpan> images;  // where each image's pads are, in image order
  // The text encoder's output rows kept as prompt_embeds: [keep_first, keep_first + keep_count).
  int64_t keep_first = 0;
  int64_t keep_count = 0;
};

// grid_thw: the processor's image_grid_thw per image, in patches; merge_size: the vision tower's
// spatial_merge_size. Edit takes exactly one image, Edit-Plus one or more. max_sequence_length
// outside 1..1024 is an InputError, as in the pipelines' check_inputs, and cuts nothing; so is a
// prompt that holds an <|image_pad|> of its own (the processor would give it no image).
EditPromptTokens tokenize_edit_prompt(Tokenizer& tokenizer, EditPipeline pipeline, std::string_view prompt,
                                      const std::vector<std::array<int64_t, 3>>& grid_thw, int64_t merge_size = 2,
                                      int64_t max_sequence_length = kDefaultMaxSequenceLength);

}  // namespace ditbatch
