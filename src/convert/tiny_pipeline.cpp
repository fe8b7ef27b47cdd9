#include "convert/tiny_pipeline.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/fs.h"
#include "convert/convert.h"
#include "io/weight_store.h"
#include "model/qwen_image_constants.h"
#include "model/random_weights.h"
#include "model/text_encoder.h"
#include "model/transformer.h"
#include "model/vae.h"

namespace ditbatch {
namespace fs = std::filesystem;

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

void write_random_component(WeightWriter& writer, const std::string& name, const std::string& config,
                            const std::vector<WeightSpec>& specs, const RandomPipelineOptions& opt) {
  writer.begin_component(name, config);
  std::vector<WeightSpec> sorted = specs;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::vector<float> values;
  std::vector<char> stored;
  for (const auto& spec : sorted) {
    if (opt.fast_draw) {
      values.resize(static_cast<size_t>(shape_numel(spec.shape)));
      fill_random(opt.seed, spec, RandomDraw::Uniform, values.data());
    } else {
      values = random_values(opt.seed, spec);
    }
    const void* data = values.data();
    if (opt.dtype != DType::F32) {
      stored.resize(values.size() * dtype_size(opt.dtype));
      convert_from_f32(values.data(), stored.data(), opt.dtype, values.size());
      data = stored.data();
    }
    writer.add_tensor(spec.name, spec.shape, opt.dtype, data);
  }
  writer.end_component();
}

}  // namespace

PipelineConfigs tiny_pipeline_configs() {
  return {tiny_transformer_config(), tiny_text_encoder_config(), vae_config(16), scheduler_config()};
}

PipelineConfigs real_width_pipeline_configs(int64_t layers) {
  if (layers < 1) fail_input("{} layers: a pipeline needs at least one transformer block and text-encoder layer", layers);
  return {fmt::format(R"({{"_class_name": "QwenImageTransformer2DModel", "patch_size": 2, "in_channels": 64,
 "out_channels": 16, "num_layers": {}, "attention_head_dim": 128, "num_attention_heads": 24,
 "joint_attention_dim": 3584, "guidance_embeds": false, "axes_dims_rope": [16, 56, 56]}})",
                      layers),
          fmt::format(R"({{"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
 "text_config": {{"hidden_size": 3584, "num_hidden_layers": {}, "num_attention_heads": 28, "num_key_value_heads": 4,
  "intermediate_size": 18944, "vocab_size": 152064, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "hidden_act": "silu", "use_sliding_window": false,
  "rope_scaling": {{"type": "mrope", "mrope_section": [16, 24, 24]}}}}}})",
                      layers),
          vae_config(96), scheduler_config()};
}

void write_random_pipeline(const RandomPipelineOptions& opt, const Log& log) {
  std::string tokenizer_dir = opt.tokenizer_dir.empty() ? std::string(DITBATCH_SOURCE_DIR) + "/weights/tokenizer"
                                                        : opt.tokenizer_dir;
  const std::vector<std::string> tokenizer_files = {"added_tokens.json", "merges.txt", "tokenizer_config.json",
                                                    "vocab.json"};
  for (const auto& f : tokenizer_files)
    if (!file_exists(tokenizer_dir + "/" + f))
      fail_input("{}/{}: missing (a random pipeline copies the real Qwen2.5-VL tokenizer from there)", tokenizer_dir, f);

  // The configs go through the models' own parsers: the specs below follow from the JSON alone.
  const PipelineConfigs& c = opt.configs;
  const TransformerConfig dit = TransformerConfig::from(Config::parse(c.transformer, opt.source + " transformer"));
  const VaeConfig vae = VaeConfig::from(Config::parse(c.vae, opt.source + " vae"));
  const TextEncoderConfig te = TextEncoderConfig::from(Config::parse(c.text_encoder, opt.source + " text_encoder"));

  std::vector<std::string> inputs;
  for (const auto& f : tokenizer_files) inputs.push_back(tokenizer_dir + "/" + f);
  check_output_file(opt.out, inputs);
  WeightWriter writer(opt.out, opt.format_version ? opt.format_version : kWeightFormatVersion);
  writer.set_root_attr("model_name", opt.model_name);
  writer.set_root_attr("source", opt.source);
  writer.set_root_attr("pipeline_class", "QwenImagePipeline");
  writer.set_root_attr("prompt_template", std::string(kQwenImagePromptTemplate));
  writer.set_root_attr("prompt_template_encode_start_idx", static_cast<int64_t>(kQwenImageDropIdx));
  write_random_component(writer, "transformer", c.transformer, QwenImageTransformer::weight_specs(dit), opt);
  write_random_component(writer, "text_encoder", c.text_encoder, QwenTextEncoder::weight_specs(te), opt);
  write_random_component(writer, "vae", c.vae, VaeDecoder::weight_specs(vae), opt);
  writer.begin_component("tokenizer", "");
  for (const auto& f : tokenizer_files) writer.add_file(f, read_file(tokenizer_dir + "/" + f));
  writer.end_component();
  writer.begin_component("scheduler", c.scheduler);
  writer.end_component();
  writer.finish();
  log.info("wrote random pipeline {} (seed {})", opt.out, opt.seed);
}

void make_tiny_pipeline(const TinyPipelineOptions& opt, const Log& log) {
  write_random_pipeline({.out = opt.out,
                         .configs = tiny_pipeline_configs(),
                         .dtype = DType::F32,
                         .seed = opt.seed,
                         .fast_draw = false,
                         .model_name = fmt::format("ditbatch-tiny-qwen-image-seed{}", opt.seed),
                         .source = "ditbatch make-tiny",
                         .tokenizer_dir = opt.tokenizer_dir},
                        log);
}

}  // namespace ditbatch
