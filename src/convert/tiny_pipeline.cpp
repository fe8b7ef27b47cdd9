#include "convert/tiny_pipeline.h"

#include <algorithm>
#include <filesystem>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/install_paths.h"
#include "convert/convert.h"
#include "io/weight_store.h"
#include "model/qwen_image_21/constants.h"
#include "model/qwen_image_21/transformer.h"
#include "model/qwen_image_21/vae.h"
#include "model/qwen_image_constants.h"
#include "model/qwen_image_edit_constants.h"
#include "model/qwen_vl_vision.h"
#include "model/random_weights.h"
#include "model/tokenizer.h"
#include "model/text_encoder.h"
#include "model/transformer.h"
#include "model/vae.h"
#include "model/vae_encoder.h"

namespace ditbatch {
namespace fs = std::filesystem;

namespace {

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

// What a family's pipeline file holds besides the tokenizer and the scheduler: each model's
// weight list (from its config, through the model's own parser) and the prompt template.
struct FamilyContents {
  std::vector<WeightSpec> transformer, text_encoder, vae;
  std::string prompt_template;
  int64_t drop_idx = 0;
};

FamilyContents family_contents(const PipelineConfigs& c, const std::string& source, const std::string& tokenizer_dir) {
  if (c.pipeline_class == "QwenImagePipeline") {
    const auto [dit, te, vae] = parse_model_configs(c, source);
    return {QwenImageTransformer::weight_specs(dit), QwenTextEncoder::weight_specs(te), VaeDecoder::weight_specs(vae),
            kQwenImagePromptTemplate, kQwenImageDropIdx};
  }
  if (c.pipeline_class == "QwenImageEditPipeline" || c.pipeline_class == "QwenImageEditPlusPipeline") {
    const auto [dit, te, vae] = parse_model_configs(c, source);
    return {QwenImageTransformer::weight_specs(dit), QwenTextEncoder::weight_specs(te), VaeDecoder::weight_specs(vae),
            c.pipeline_class == "QwenImageEditPipeline" ? kQwenImageEditPromptTemplate : kQwenImageEditPlusPromptTemplate,
            kQwenImageEditDropIdx};
  }
  if (c.pipeline_class == "QwenImage21Pipeline") {
    const auto dit = Transformer21Config::from(Config::parse(c.transformer, source + " transformer"));
    const auto te = TextEncoderConfig::from(Config::parse(c.text_encoder, source + " text_encoder"));
    const auto vae = Vae21Config::from(Config::parse(c.vae, source + " vae"));
    // The system turn's tokens, as convert counts them with the folder's tokenizer.
    Tokenizer tokenizer = Tokenizer::from_folder(tokenizer_dir);
    return {QwenImage21Transformer::weight_specs(dit), QwenTextEncoder::weight_specs(te, "model.language_model."),
            QwenImage21VaeDecoder::weight_specs(vae), kQwenImage21PromptTemplate,
            std::ssize(tokenizer.encode(qwen_image_21_system_turn()))};
  }
  fail_input("{}: no random pipeline of class '{}'", source, c.pipeline_class);
}

// The VAE encoder's tensors, for the families whose model encodes input images (convert's
// keeps_vae_encoder): written after the decoder's, in the VAE component.
void add_vae_encoder(FamilyContents& contents, const PipelineConfigs& c, const std::string& source) {
  if (!keeps_vae_encoder(c.pipeline_class)) return;
  const VaeConfig vae = VaeConfig::from(Config::parse(c.vae, source + " vae"));
  const std::vector<WeightSpec> encoder = VaeEncoder::weight_specs(vae);
  contents.vae.insert(contents.vae.end(), encoder.begin(), encoder.end());
}

// The text encoder's vision tower (visual.*, from its config's vision_config), for the families
// whose model reads input images (convert's reads_images); they need the image processor's settings.
void add_vision_tower(FamilyContents& contents, const PipelineConfigs& c, const std::string& source) {
  if (!reads_images(c.pipeline_class)) return;
  if (c.processor.empty()) fail_input("{}: a {} without the image processor's settings", source, c.pipeline_class);
  const VisionConfig vision = VisionConfig::from(Config::parse(c.text_encoder, source + " text_encoder"));
  for (WeightSpec& spec : QwenVisionTower::weight_specs(vision, QwenVisionTower::kTensorPrefix))
    contents.text_encoder.push_back(std::move(spec));
}

const std::vector<std::string> kTokenizerFiles = {"added_tokens.json", "merges.txt", "tokenizer_config.json",
                                                  "vocab.json"};

}  // namespace

std::string checked_tokenizer_folder(const std::string& dir) {
  const std::string tokenizer_dir = dir.empty() ? data_path("tokenizer", "weights/tokenizer") : dir;
  for (const auto& f : kTokenizerFiles)
    if (!file_exists(tokenizer_dir + "/" + f))
      fail_input("{}/{}: missing (a random pipeline copies the real Qwen2.5-VL tokenizer from there)", tokenizer_dir, f);
  Tokenizer::from_folder(tokenizer_dir);
  return tokenizer_dir;
}

void write_random_pipeline(const RandomPipelineOptions& opt, const Log& log) {
  const std::string tokenizer_dir = checked_tokenizer_folder(opt.tokenizer_dir);
  const std::vector<std::string>& tokenizer_files = kTokenizerFiles;

  // The configs go through the models' own parsers: the specs below follow from the JSON alone.
  const PipelineConfigs& c = opt.configs;
  FamilyContents contents = family_contents(c, opt.source, tokenizer_dir);
  add_vae_encoder(contents, c, opt.source);
  add_vision_tower(contents, c, opt.source);

  std::vector<std::string> inputs;
  for (const auto& f : tokenizer_files) inputs.push_back(tokenizer_dir + "/" + f);
  check_output_file(opt.out, inputs);
  WeightWriter writer(opt.out, opt.format_version ? opt.format_version : kWeightFormatVersion);
  writer.set_root_attr("model_name", opt.model_name);
  writer.set_root_attr("source", opt.source);
  writer.set_root_attr("pipeline_class", c.pipeline_class);
  writer.set_root_attr("prompt_template", contents.prompt_template);
  writer.set_root_attr("prompt_template_encode_start_idx", contents.drop_idx);
  write_random_component(writer, "transformer", c.transformer, contents.transformer, opt);
  write_random_component(writer, "text_encoder", c.text_encoder, contents.text_encoder, opt);
  write_random_component(writer, "vae", c.vae, contents.vae, opt);
  writer.begin_component("tokenizer", "");
  for (const auto& f : tokenizer_files) writer.add_file(f, read_file(tokenizer_dir + "/" + f));
  writer.end_component();
  writer.begin_component("scheduler", c.scheduler);
  writer.end_component();
  if (!c.processor.empty()) {  // as convert stores preprocessor_config.json
    writer.begin_component("processor", c.processor);
    writer.end_component();
  }
  writer.finish();
  log.info("wrote random pipeline {} (seed {})", opt.out, opt.seed);
}

namespace {

// make-tiny's families by --model name, the default first.
struct TinyFamily {
  const char* model;
  PipelineConfigs (*configs)();
};
const TinyFamily kTinyFamilies[] = {
    {"qwen-image", tiny_pipeline_configs},
    {"qwen-image-2.1", tiny_pipeline_21_configs},
    {"qwen-image-edit", [] { return tiny_pipeline_edit_configs("QwenImageEditPipeline", false); }},
    {"qwen-image-edit-2509", [] { return tiny_pipeline_edit_configs("QwenImageEditPlusPipeline", false); }},
    {"qwen-image-edit-2511", [] { return tiny_pipeline_edit_configs("QwenImageEditPlusPipeline", true); }},
};

}  // namespace

std::vector<std::string> tiny_pipeline_models() {
  std::vector<std::string> models;
  for (const TinyFamily& f : kTinyFamilies) models.push_back(f.model);
  return models;
}

void make_tiny_pipeline(const TinyPipelineOptions& opt, const Log& log) {
  const auto family = std::find_if(std::begin(kTinyFamilies), std::end(kTinyFamilies),
                                   [&](const TinyFamily& f) { return opt.model == f.model; });
  if (family == std::end(kTinyFamilies))
    fail_input("--model '{}': make-tiny writes {}", opt.model, fmt::join(tiny_pipeline_models(), ", "));
  write_random_pipeline({.out = opt.out,
                         .configs = family->configs(),
                         .dtype = DType::F32,
                         .seed = opt.seed,
                         .fast_draw = false,
                         .model_name = fmt::format("ditbatch-tiny-{}-seed{}", opt.model, opt.seed),
                         .source = "ditbatch make-tiny",
                         .tokenizer_dir = opt.tokenizer_dir},
                        log);
}

}  // namespace ditbatch
