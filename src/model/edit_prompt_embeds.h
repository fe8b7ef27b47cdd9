// The Edit pipelines' _get_qwen_prompt_embeds for one prompt (spec qwen-image-edit.md §7): the
// text encoder over the prompt's ids with the vision tower's rows at the image pads, the output
// after the final norm, the rows after the drop of 64. The image tokens' rows are part of it.
#pragma once

#include "model/edit_prompt_tokens.h"
#include "model/text_encoder.h"
#include "model/text_positions.h"

namespace ditbatch {

// image_rows: the vision tower's output for the prompt's images, in order, [pads, hidden].
// -> prompt_embeds [keep_count, hidden]: a view of the encoder's [L, hidden] output.
Tensor edit_prompt_embeds(QwenTextEncoder& text_encoder, const EditPromptTokens& tokens, const Tensor& image_rows,
                          TextPositionMode positions);

}  // namespace ditbatch
