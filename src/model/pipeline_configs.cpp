#include "model/pipeline_configs.h"

#include <fmt/format.h>

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

std::string tiny_transformer_config() {
  return R"({"_class_name": "QwenImageTransformer2DModel", "patch_size": 2, "in_channels": 64, "out_channels": 16,
 "num_layers": 2, "attention_head_dim": 32, "num_attention_heads": 2, "joint_attention_dim": 64,
 "guidance_embeds": false, "axes_dims_rope": [8, 12, 12]})";
}

std::string vae_config(int64_t base_dim) {
  return fmt::format(R"({{"_class_name": "AutoencoderKLQwenImage", "base_dim": {}, "z_dim": 16, "dim_mult": [1, 2, 4, 4],
 "num_res_blocks": 2, "attn_scales": [], "temperal_downsample": [false, true, true], "dropout": 0.0,
 "latents_mean": {}, "latents_std": {}}})",
                     base_dim, kLatentsMean, kLatentsStd);
}

std::string tiny_text_encoder_config() {
  return R"({"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
 "text_config": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "intermediate_size": 128, "vocab_size": 152064, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "hidden_act": "silu", "use_sliding_window": false,
  "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}})";
}

std::string scheduler_config() {
  return R"({"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 1.0,
 "use_dynamic_shifting": true, "base_shift": 0.5, "max_shift": 0.9, "base_image_seq_len": 256,
 "max_image_seq_len": 8192, "shift_terminal": 0.02, "time_shift_type": "exponential", "invert_sigmas": false,
 "use_karras_sigmas": false, "use_exponential_sigmas": false, "use_beta_sigmas": false,
 "stochastic_sampling": false})";
}

}  // namespace

PipelineConfigs tiny_pipeline_configs() {
  return {tiny_transformer_config(), tiny_text_encoder_config(), vae_config(16), scheduler_config()};
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
