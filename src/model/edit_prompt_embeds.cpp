#include "model/edit_prompt_embeds.h"

namespace ditbatch {

Tensor edit_prompt_embeds(QwenTextEncoder& text_encoder, const EditPromptTokens& tokens, const Tensor& image_rows,
                          TextPositionMode positions) {
  const auto L = static_cast<int64_t>(tokens.ids.size());
  Tensor hidden = text_encoder.encode(tokens.ids, image_rows, text_positions(positions, L, tokens.images));  // [L, hidden]
  return hidden.slice0(tokens.keep_first, tokens.keep_first + tokens.keep_count);
}

}  // namespace ditbatch
