#include "model/text_positions.h"

#include <algorithm>

#include "core/error.h"

namespace ditbatch {

TextPositionIds sequential_positions(int64_t length) {
  TextPositionIds pos;
  for (auto& axis : pos.axes) {
    axis.resize(static_cast<size_t>(length));
    for (int64_t i = 0; i < length; ++i) axis[static_cast<size_t>(i)] = i;
  }
  return pos;
}

TextPositionIds mrope_positions(int64_t length, const std::vector<ImageTokenSpan>& images) {
  TextPositionIds pos;
  auto append = [&](int64_t t, int64_t h, int64_t w) {
    pos.axes[0].push_back(t);
    pos.axes[1].push_back(h);
    pos.axes[2].push_back(w);
  };
  int64_t cursor = 0, next_id = 0;
  auto text_run = [&](int64_t end) {
    for (; next_id < end; ++next_id, ++cursor) append(cursor, cursor, cursor);
  };
  for (const ImageTokenSpan& image : images) {
    if (image.first < next_id || image.grid_t < 1 || image.grid_h < 1 || image.grid_w < 1 ||
        image.first + image.count() > length)
      fail_input("M-RoPE positions: image tokens at {} with grid ({}, {}, {}) overlap the previous image or leave "
                 "the {} ids",
                 image.first, image.grid_t, image.grid_h, image.grid_w, length);
    text_run(image.first);
    for (int64_t t = 0; t < image.grid_t; ++t)
      for (int64_t r = 0; r < image.grid_h; ++r)
        for (int64_t c = 0; c < image.grid_w; ++c) append(cursor + t, cursor + r, cursor + c);
    next_id += image.count();
    cursor += std::max(image.grid_h, image.grid_w);
  }
  text_run(length);
  return pos;
}

const char* text_position_mode_name(TextPositionMode mode) {
  return mode == TextPositionMode::MRope ? "mrope" : "sequential";
}

TextPositionMode parse_text_position_mode(const std::string& name, const std::string& what) {
  if (name == "sequential") return TextPositionMode::Sequential;
  if (name == "mrope") return TextPositionMode::MRope;
  fail_input("{} '{}' (expected sequential, as diffusers 0.42.1 numbers an edit's image tokens, or mrope, the 3-D "
             "positions the model was trained with)",
             what, name);
}

}  // namespace ditbatch
