#include "model/pipeline_configs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "io/config.h"
#include "core/error.h"

namespace ditbatch {

namespace {

// The published Qwen-Image per-channel latent statistics (spec qwen-image.md §1).
const char* kLatentsMean =
    "[-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508, 0.4134, -0.0715, 0.5517, -0.3632, "
    "-0.1922, -0.9497, 0.2503, -0.2921]";
const char* kLatentsStd =
    "[2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743, 3.2687, 2.1526, 2.8652, 1.5579, 1.6382, "
    "1.1253, 2.8251, 1.9160]";

// `extra`: further keys (Edit's zero_cond_t), after a comma.
std::string tiny_transformer_config(const std::string& extra = "") {
  return fmt::format(R"({{"_class_name": "QwenImageTransformer2DModel", "patch_size": 2, "in_channels": 64,
 "out_channels": 16, "num_layers": 2, "attention_head_dim": 32, "num_attention_heads": 2, "joint_attention_dim": 64,
 "guidance_embeds": false, "axes_dims_rope": [8, 12, 12]{}}})",
                     extra);
}

std::string vae_config(int64_t base_dim) {
  return fmt::format(R"({{"_class_name": "AutoencoderKLQwenImage", "base_dim": {}, "z_dim": 16, "dim_mult": [1, 2, 4, 4],
 "num_res_blocks": 2, "attn_scales": [], "temperal_downsample": [false, true, true], "dropout": 0.0,
 "latents_mean": {}, "latents_std": {}}})",
                     base_dim, kLatentsMean, kLatentsStd);
}

// The vision tower's keys sit beside text_config, as in Qwen2.5-VL's config.json ("" for none).
std::string tiny_text_encoder_config(const std::string& vision = "") {
  return fmt::format(R"({{"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
 "text_config": {{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "intermediate_size": 128, "vocab_size": 152064, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "hidden_act": "silu", "use_sliding_window": false,
  "rope_scaling": {{"type": "mrope", "mrope_section": [2, 3, 3]}}}}{}}})",
                     vision);
}

// The real checkpoint's token ids (the shipped tokenizer's) and a 2-block tower with the real
// patch, merge and window geometry: block 0 windowed, block 1 full attention.
const char* kTinyVisionKeys = R"(, "image_token_id": 151655, "vision_start_token_id": 151652,
 "vision_end_token_id": 151653,
 "vision_config": {"depth": 2, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "out_hidden_size": 64,
  "patch_size": 14, "temporal_patch_size": 2, "spatial_merge_size": 2, "window_size": 112,
  "fullatt_block_indexes": [1], "in_channels": 3, "hidden_act": "silu", "tokens_per_second": 2,
  "rope_parameters": {"rope_type": "axial", "rope_theta": 10000.0}})";

// Qwen2.5-VL's published preprocessor_config.json (Qwen-Image-Edit's processor/).
const char* kQwen25VLPreprocessorConfig = R"({"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14,
 "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
 "image_std": [0.26862954, 0.26130258, 0.27577711], "image_processor_type": "Qwen2VLImageProcessor",
 "processor_class": "Qwen2_5_VLProcessor"})";

std::string scheduler_config() {
  return R"({"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 1.0,
 "use_dynamic_shifting": true, "base_shift": 0.5, "max_shift": 0.9, "base_image_seq_len": 256,
 "max_image_seq_len": 8192, "shift_terminal": 0.02, "time_shift_type": "exponential", "invert_sigmas": false,
 "use_karras_sigmas": false, "use_exponential_sigmas": false, "use_beta_sigmas": false,
 "stochastic_sampling": false})";
}

// The tiny QwenImage21Pipeline's VAE statistics as diffusers built it (tools/golden, tiny_21).
const char* kLatentsMean21 =
    "[-2.7814, 0.1919, -0.3751, 0.7174, -0.4398, 2.2507, -5.6986, 0.4974, 1.1289, -2.6457, 2.7775, 0.6262, "
    "-0.0137, 0.1582, -2.6184, -1.6234]";
const char* kLatentsStd21 =
    "[4.0775, 3.8457, 4.3942, 4.0961, 3.6699, 3.5104, 4.1776, 3.5781, 4.4496, 3.8589, 4.0068, 4.0261, 4.0987, "
    "4.2087, 4.3249, 3.935]";

std::string transformer_21_config(int64_t layers, int64_t heads, int64_t head_dim, int64_t context, int64_t channels,
                                  const char* axes) {
  return fmt::format(R"({{"_class_name": "QwenImage21Transformer2DModel", "patch_size": 1, "in_channels": {},
 "out_channels": {}, "num_layers": {}, "attention_head_dim": {}, "num_attention_heads": {}, "context_in_dim": {},
 "mlp_ratio": 3, "axes_dims_rope": {}, "eps": 1e-06, "causal_condition": true}})",
                     channels, channels, layers, head_dim, heads, context, axes);
}

std::string text_encoder_21_config(int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                   int64_t intermediate, const char* mrope_section) {
  return fmt::format(R"({{"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
 "text_config": {{"model_type": "qwen3_vl_text", "hidden_size": {}, "num_hidden_layers": {}, "num_attention_heads": {},
  "num_key_value_heads": {}, "head_dim": {}, "intermediate_size": {}, "vocab_size": 151936, "rms_norm_eps": 1e-06,
  "hidden_act": "silu", "attention_bias": false,
  "rope_parameters": {{"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": {},
   "mrope_interleaved": true}}}}}})",
                     hidden, layers, heads, kv_heads, head_dim, intermediate, mrope_section);
}

// decoder_base_dim 8 over the five levels; z_dim 16 with the tiny pipeline's statistics, or
// another z_dim with neutral ones (mean 0, std 1).
std::string tiny_vae_21_config(int64_t z_dim) {
  std::string mean = kLatentsMean21, std = kLatentsStd21;
  if (z_dim != 16) {
    mean = fmt::format("[{}]", fmt::join(std::vector<std::string>(static_cast<size_t>(z_dim), "0.0"), ", "));
    std = fmt::format("[{}]", fmt::join(std::vector<std::string>(static_cast<size_t>(z_dim), "1.0"), ", "));
  }
  return fmt::format(R"({{"_class_name": "AutoencoderKLQwenImage21", "base_dim": 8, "decoder_base_dim": 8, "z_dim": {},
 "dim_mult": [1, 2, 4, 8, 8], "num_res_blocks": 2, "attn_scales": [], "temperal_downsample": [false, true, true, true],
 "dropout": 0.0, "is_residual": true, "in_channels": 4, "out_channels": 4, "patch_size": null,
 "latents_mean": {}, "latents_std": {}}})",
                     z_dim, mean, std);
}

}  // namespace

PipelineConfigs tiny_pipeline_21_configs() {
  PipelineConfigs c{transformer_21_config(2, 2, 32, 64, 16, "[8, 12, 12]"),
                    text_encoder_21_config(64, 2, 4, 2, 16, 128, "[2, 3, 3]"), tiny_vae_21_config(16),
                    scheduler_config()};
  c.pipeline_class = "QwenImage21Pipeline";
  return c;
}

PipelineConfigs real_width_pipeline_21_configs(int64_t dit_layers, int64_t text_layers) {
  if (dit_layers < 1 || text_layers < 1)
    fail_input("{} transformer blocks and {} text-encoder layers: a pipeline needs at least one of each", dit_layers,
               text_layers);
  PipelineConfigs c{transformer_21_config(dit_layers, 32, 128, 4096, 64, "[16, 56, 56]"),
                    text_encoder_21_config(4096, text_layers, 32, 8, 128, 12288, "[24, 20, 20]"),
                    tiny_vae_21_config(64), scheduler_config()};
  c.pipeline_class = "QwenImage21Pipeline";
  return c;
}

PipelineConfigs tiny_pipeline_configs() {
  return {tiny_transformer_config(), tiny_text_encoder_config(), vae_config(16), scheduler_config()};
}

PipelineConfigs tiny_pipeline_edit_configs(const std::string& pipeline_class, bool zero_cond_t) {
  PipelineConfigs c{tiny_transformer_config(fmt::format(R"(, "zero_cond_t": {})", zero_cond_t)),
                    tiny_text_encoder_config(kTinyVisionKeys), vae_config(4), scheduler_config()};
  c.pipeline_class = pipeline_class;
  c.processor = kQwen25VLPreprocessorConfig;
  return c;
}

PipelineConfigs real_width_pipeline_configs(int64_t dit_layers, int64_t text_layers) {
  if (dit_layers < 1 || text_layers < 1)
    fail_input("{} transformer blocks and {} text-encoder layers: a pipeline needs at least one of each", dit_layers,
               text_layers);
  return {fmt::format(R"({{"_class_name": "QwenImageTransformer2DModel", "patch_size": 2, "in_channels": 64,
 "out_channels": 16, "num_layers": {}, "attention_head_dim": 128, "num_attention_heads": 24,
 "joint_attention_dim": 3584, "guidance_embeds": false, "axes_dims_rope": [16, 56, 56]}})",
                      dit_layers),
          fmt::format(R"({{"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
 "text_config": {{"hidden_size": 3584, "num_hidden_layers": {}, "num_attention_heads": 28, "num_key_value_heads": 4,
  "intermediate_size": 18944, "vocab_size": 152064, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "hidden_act": "silu", "use_sliding_window": false,
  "rope_scaling": {{"type": "mrope", "mrope_section": [16, 24, 24]}}}}}})",
                      text_layers),
          vae_config(96), scheduler_config()};
}

ModelConfigs parse_model_configs(const PipelineConfigs& c, const std::string& source) {
  return {TransformerConfig::from(Config::parse(c.transformer, source + " transformer")),
          TextEncoderConfig::from(Config::parse(c.text_encoder, source + " text_encoder")),
          VaeConfig::from(Config::parse(c.vae, source + " vae"))};
}

}  // namespace ditbatch
