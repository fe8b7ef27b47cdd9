// The component configs of each family's pipeline, as diffusers' config.json texts, in the
// sizes this project builds random models of: written out here once, and read through the
// models' own parsers by make-tiny, the benchmarks and the tests.
#pragma once

#include <cstdint>
#include <string>

#include "model/text_encoder.h"
#include "model/transformer.h"
#include "model/vae.h"

namespace ditbatch {

struct PipelineConfigs {
  std::string transformer, text_encoder, vae, scheduler;
  std::string pipeline_class = "QwenImagePipeline";  // the family the components are of
  std::string processor;  // the image processor's preprocessor_config.json (Edit); "" for text to image
};
// make-tiny's: DiT 2 blocks of 2 heads x 32, rope axes (8, 12, 12), joint dim 64; VAE base_dim
// 16, z_dim 16; text encoder hidden 64, 2 layers, GQA 4/2.
PipelineConfigs tiny_pipeline_configs();
// The published Qwen-Image widths (3072-wide blocks, the 3584-wide text encoder with its
// 152,064-row embedding, the real VAE) with the given depths: real tensor sizes, with fewer
// layers where a test or a benchmark wants GBs made in seconds.
PipelineConfigs real_width_pipeline_configs(int64_t dit_layers, int64_t text_layers);
// The published model: 60 transformer blocks, 28 text-encoder layers.
inline PipelineConfigs real_pipeline_configs() { return real_width_pipeline_configs(60, 28); }

// Qwen-Image-2.1's (QwenImage21Pipeline) for make-tiny --model qwen-image-2.1: DiT 2 blocks of 2
// heads x 32, rope axes (8, 12, 12), text width 64; VAE decoder_base_dim 8, z_dim 16, its five
// levels; Qwen3-VL text encoder hidden 64, 2 layers, GQA 4/2 with QK-norm, interleaved M-RoPE.
PipelineConfigs tiny_pipeline_21_configs();
// The published Qwen-Image-2.1 transformer and text-encoder widths (4096-wide blocks, 64 latent
// channels, Qwen3-VL-8B's 151,936-row embedding) with the given depths, and a tiny VAE of 64
// channels (neutral latent statistics): for the benchmarks, whose weights are random anyway.
PipelineConfigs real_width_pipeline_21_configs(int64_t dit_layers, int64_t text_layers);
// The published 2.1 transformer: 32 blocks (and Qwen3-VL-8B's 36 text layers).
inline PipelineConfigs real_pipeline_21_configs() { return real_width_pipeline_21_configs(32, 36); }

// The Edit families' (QwenImageEditPipeline; QwenImageEditPlusPipeline, with zero_cond_t for 2511)
// for make-tiny --model qwen-image-edit*: make-tiny's Qwen-Image sizes with a VAE of base_dim 4 (its
// encoder runs at ~1024x1024, the size the pipeline gives every input), a vision tower of 2 blocks
// (window, then full attention) of 2 heads x 16 into the text width 64, and Qwen2.5-VL's published
// image processor settings.
PipelineConfigs tiny_pipeline_edit_configs(const std::string& pipeline_class, bool zero_cond_t);

struct ModelConfigs {
  TransformerConfig transformer;
  TextEncoderConfig text_encoder;
  VaeConfig vae;
};
// Each component's config through its model's parser (source names them in errors).
ModelConfigs parse_model_configs(const PipelineConfigs& configs, const std::string& source);

}  // namespace ditbatch
