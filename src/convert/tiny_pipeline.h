// `ditbatch make-tiny`: a small random pipeline of a family (Qwen-Image, Qwen-Image-2.1, the Edit
// families) with the real architecture (tiny_pipeline_configs / tiny_pipeline_21_configs /
// tiny_pipeline_edit_configs, model/pipeline_configs.h) and the real Qwen2.5-VL tokenizer (the
// byte-level BPE Qwen3-VL's shares). An Edit file holds what convert writes of an Edit folder: the
// vision tower in the text encoder, the VAE encoder, the processor component.
// Deterministic for a seed: the same seed writes the same file, byte for byte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/log.h"
#include "model/pipeline_configs.h"

namespace ditbatch {

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
  std::string model = "qwen-image";  // or another of tiny_pipeline_models()
  uint64_t seed = 0;
  std::string tokenizer_dir;  // default: the tokenizer shipped in weights/tokenizer
};

// The tokenizer folder a random pipeline copies ("" names the shipped one): its path, once
// each file it copies is there and the tokenizer loads from them (InputError naming the file).
std::string checked_tokenizer_folder(const std::string& tokenizer_dir);

// The families make-tiny writes, as --model names them.
std::vector<std::string> tiny_pipeline_models();
void make_tiny_pipeline(const TinyPipelineOptions& options, const Log& log);

}  // namespace ditbatch
