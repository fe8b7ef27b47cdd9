// Where each sample's tokens sit in one transformer forward's joint sequences: one sample, or
// the two of true CFG run as one batch.
//
// The text stream stacks the samples' texts. In Q (every text token) and in K and V (only the
// real ones: the masked softmax), sample 0 is [text 0; image 0] as in diffusers, and sample 1 is
// stored the other way round, [image 1; text 1], right after it: attention does not depend on
// the order of its keys, nor a query's result on where its row sits, and so the image rows of
// both samples are adjacent, one GEMM and one norm+RoPE for all of them.
//
// Q, K, V and the attention output also hold `spare` rows past the last sample, for a backend
// that pads each sample's lengths (Backend::attention's spare rows); K and V's are zeros, as
// masked padding must be finite. Sample 0's spare rows are then sample 1's: it reads them as
// masked padding and may overwrite sample 1's output rows, which is why the samples' attention
// runs in order, sample 1 last, writing its own rows after.
#pragma once

#include <array>
#include <cstdint>

namespace ditbatch {

struct JointRows {
  int64_t samples = 0, image = 0;                  // B, and S image tokens per sample
  std::array<int64_t, 2> text{}, valid{};          // per sample: L text tokens, Lv of them real
  std::array<int64_t, 2> text_row{};               // sample b's first row in the text stream
  int64_t text_rows = 0;                           // all samples' text tokens
  int64_t q_image = 0, kv_image = 0;               // the first image row in Q, in K/V (all samples')
  std::array<int64_t, 2> q_text{}, kv_text{};      // sample b's text rows in Q, in K/V
  std::array<int64_t, 2> q_start{}, kv_start{};    // sample b's joint sequence in Q, in K/V
  int64_t q_rows = 0, kv_rows = 0;
  int64_t spare = 0;                               // rows past q_rows and kv_rows (see above)

  JointRows(int64_t samples_, int64_t image_, const std::array<int64_t, 2>& text_,
            const std::array<int64_t, 2>& valid_, int64_t spare_ = 0)
      : samples(samples_), image(image_), text(text_), valid(valid_), spare(spare_) {
    text_row = {0, text[0]};
    text_rows = text[0] + (samples == 2 ? text[1] : 0);
    const int64_t valid_rows = valid[0] + (samples == 2 ? valid[1] : 0);
    q_image = text[0];
    kv_image = valid[0];
    q_text = {0, text[0] + samples * image};
    kv_text = {0, valid[0] + samples * image};
    q_start = {0, text[0] + image};
    kv_start = {0, valid[0] + image};
    q_rows = text_rows + samples * image;
    kv_rows = valid_rows + samples * image;
  }
  int64_t q_length(int64_t b) const { return text[b] + image; }    // sample b's queries
  int64_t kv_length(int64_t b) const { return valid[b] + image; }  // sample b's keys
};

}  // namespace ditbatch
