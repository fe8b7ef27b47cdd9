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
  const auto [dit, te, vae] = parse_model_configs(c, opt.source);

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
