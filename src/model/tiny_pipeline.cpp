#include "model/tiny_pipeline.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/fs.h"
#include "io/convert.h"
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

std::string transformer_config() {
  return R"({"_class_name": "QwenImageTransformer2DModel", "patch_size": 2, "in_channels": 64, "out_channels": 16,
 "num_layers": 2, "attention_head_dim": 32, "num_attention_heads": 2, "joint_attention_dim": 64,
 "guidance_embeds": false, "axes_dims_rope": [8, 12, 12]})";
}

std::string vae_config() {
  return fmt::format(R"({{"_class_name": "AutoencoderKLQwenImage", "base_dim": 16, "z_dim": 16, "dim_mult": [1, 2, 4, 4],
 "num_res_blocks": 2, "attn_scales": [], "temperal_downsample": [false, true, true], "dropout": 0.0,
 "latents_mean": {}, "latents_std": {}}})",
                     kLatentsMean, kLatentsStd);
}

std::string text_encoder_config() {
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
                            const std::vector<WeightSpec>& specs, uint64_t seed) {
  writer.begin_component(name, config);
  std::vector<WeightSpec> sorted = specs;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& spec : sorted) {
    std::vector<float> values = random_values(seed, spec);
    writer.add_tensor(spec.name, spec.shape, DType::F32, values.data());
  }
  writer.end_component();
}

}  // namespace

void make_tiny_pipeline(const TinyPipelineOptions& opt, const Log& log) {
  std::string tokenizer_dir = opt.tokenizer_dir.empty() ? std::string(DITBATCH_SOURCE_DIR) + "/weights/tokenizer"
                                                        : opt.tokenizer_dir;
  const std::vector<std::string> tokenizer_files = {"added_tokens.json", "merges.txt", "tokenizer_config.json",
                                                    "vocab.json"};
  for (const auto& f : tokenizer_files)
    if (!file_exists(tokenizer_dir + "/" + f))
      fail_input("{}/{}: missing (make-tiny copies the real Qwen2.5-VL tokenizer from there)", tokenizer_dir, f);

  // The configs go through the models' own parsers: the specs below follow from the JSON alone.
  const TransformerConfig dit = TransformerConfig::from(Config::parse(transformer_config(), "make-tiny transformer"));
  const VaeConfig vae = VaeConfig::from(Config::parse(vae_config(), "make-tiny vae"));
  const TextEncoderConfig te = TextEncoderConfig::from(Config::parse(text_encoder_config(), "make-tiny text_encoder"));

  std::vector<std::string> inputs;
  for (const auto& f : tokenizer_files) inputs.push_back(tokenizer_dir + "/" + f);
  check_output_file(opt.out, inputs);
  WeightWriter writer(opt.out);
  writer.set_root_attr("model_name", fmt::format("ditbatch-tiny-qwen-image-seed{}", opt.seed));
  writer.set_root_attr("source", "ditbatch make-tiny");
  writer.set_root_attr("pipeline_class", "QwenImagePipeline");
  writer.set_root_attr("prompt_template", std::string(kQwenImagePromptTemplate));
  writer.set_root_attr("prompt_template_encode_start_idx", static_cast<int64_t>(kQwenImageDropIdx));
  write_random_component(writer, "transformer", transformer_config(), QwenImageTransformer::weight_specs(dit), opt.seed);
  write_random_component(writer, "text_encoder", text_encoder_config(), QwenTextEncoder::weight_specs(te), opt.seed);
  write_random_component(writer, "vae", vae_config(), VaeDecoder::weight_specs(vae), opt.seed);
  writer.begin_component("tokenizer", "");
  for (const auto& f : tokenizer_files) writer.add_file(f, read_file(tokenizer_dir + "/" + f));
  writer.end_component();
  writer.begin_component("scheduler", scheduler_config());
  writer.end_component();
  writer.finish();
  log.info("wrote tiny random pipeline {} (seed {})", opt.out, opt.seed);
}

}  // namespace ditbatch
