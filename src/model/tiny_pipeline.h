// `ditbatch make-tiny`: a small random Qwen-Image pipeline with the real architecture (DiT 2
// blocks of 2 heads x 32, rope axes (8,12,12), joint dim 64; VAE base_dim 16, z_dim 16; text
// encoder hidden 64, 2 layers, GQA 4/2) and the real Qwen2.5-VL tokenizer. Deterministic for
// a seed: the same seed writes the same file, byte for byte.
#pragma once

#include <cstdint>
#include <string>

#include "core/log.h"

namespace ditbatch {

struct TinyPipelineOptions {
  std::string out;
  uint64_t seed = 0;
  std::string tokenizer_dir;  // default: the tokenizer shipped in weights/tokenizer
};

void make_tiny_pipeline(const TinyPipelineOptions& options, const Log& log);

}  // namespace ditbatch
