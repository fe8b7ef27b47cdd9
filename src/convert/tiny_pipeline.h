// `ditbatch make-tiny`: a small random Qwen-Image pipeline with the real architecture (DiT 2
// blocks of 2 heads x 32, rope axes (8,12,12), joint dim 64; VAE base_dim 16, z_dim 16; text
// encoder hidden 64, 2 layers, GQA 4/2) and the real Qwen2.5-VL tokenizer. Deterministic for
// a seed: the same seed writes the same file, byte for byte.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/log.h"

namespace ditbatch {

// The diffusers config.json texts of a pipeline's components.
struct PipelineConfigs {
  std::string transformer, text_encoder, vae, scheduler;
};
// make-tiny's (above).
PipelineConfigs tiny_pipeline_configs();
// The published Qwen-Image widths (3072-wide blocks, the 3584-wide text encoder with its
// 152,064-row embedding, the real VAE) with `layers` transformer blocks and text-encoder layers
// (the real model has 60 and 28): a file of real tensor sizes, GBs made in seconds, for timing
// the weight load without the real checkpoint.
PipelineConfigs real_width_pipeline_configs(int64_t layers);

struct RandomPipelineOptions {
  std::string out;
  PipelineConfigs configs;
  DType dtype = DType::F32;
  int64_t format_version = 0;  // 0: this ditbatch's; 2: the older format's SHA-256 digests
  uint64_t seed = 0;
  bool fast_draw = false;  // RandomDraw::Uniform (parallel, for big files) instead of make-tiny's Normal
  std::string model_name, source;
  std::string tokenizer_dir;  // default: the tokenizer shipped in weights/tokenizer
};
// A whole pipeline file of random weights: the tokenizer's real files, every component's
// tensors from the models' own weight lists.
void write_random_pipeline(const RandomPipelineOptions& options, const Log& log);

struct TinyPipelineOptions {
  std::string out;
  uint64_t seed = 0;
  std::string tokenizer_dir;  // default: the tokenizer shipped in weights/tokenizer
};

void make_tiny_pipeline(const TinyPipelineOptions& options, const Log& log);

}  // namespace ditbatch
