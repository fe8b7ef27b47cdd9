// The RoPE positions a Qwen2.5-VL language model gives a prompt that holds image tokens (spec
// qwen-image-edit.md §6). Trained: get_rope_index's 3-D M-RoPE, where an image's tokens share
// one temporal position and count rows and columns on the other two axes. Installed reference
// (diffusers 0.42.1 + transformers 5.24.0): the Edit pipelines drop mm_token_type_ids, so the
// model falls back to 0..L-1 on all three axes, image tokens included.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ditbatch {

enum class TextPositionMode {
  Sequential,  // arange(L) on T, H and W: what the goldens' stack runs
  MRope,       // get_rope_index: what the model was trained with
};

// One image's run of <|image_pad|> tokens in a prompt's ids, with its grid in language-model
// tokens (the processor's image_grid_thw over (1, merge, merge)): grid_t * grid_h * grid_w pads.
struct ImageTokenSpan {
  int64_t first = 0;  // index of its first pad in the ids
  int64_t grid_t = 1, grid_h = 0, grid_w = 0;
  int64_t count() const { return grid_t * grid_h * grid_w; }
  bool operator==(const ImageTokenSpan&) const = default;
};

// position_ids of one sequence: [3, L], rows temporal, height, width.
struct TextPositionIds {
  std::array<std::vector<int64_t>, 3> axes;
  int64_t length() const { return static_cast<int64_t>(axes[0].size()); }
  // The three rows equal: M-RoPE is then plain 1-D RoPE, whatever its sections.
  bool rows_equal() const { return axes[0] == axes[1] && axes[0] == axes[2]; }
};

TextPositionIds sequential_positions(int64_t length);

// get_rope_index for one unpadded sequence of `length` ids whose image tokens are `images` (in
// order, inside the sequence, not overlapping): a text run of n at cursor p gets p..p+n-1 on all
// axes and moves the cursor by n; an image gets T = p + t, H = p + row, W = p + column (t-major,
// then row-major) and moves the cursor by max(grid_h, grid_w).
TextPositionIds mrope_positions(int64_t length, const std::vector<ImageTokenSpan>& images);

// "sequential" / "mrope", as --text-positions names them and an image's record keeps them.
const char* text_position_mode_name(TextPositionMode mode);
// The mode of a name; an InputError naming `what` and the names for any other.
TextPositionMode parse_text_position_mode(const std::string& name, const std::string& what);

inline TextPositionIds text_positions(TextPositionMode mode, int64_t length, const std::vector<ImageTokenSpan>& images) {
  return mode == TextPositionMode::MRope ? mrope_positions(length, images) : sequential_positions(length);
}

}  // namespace ditbatch
