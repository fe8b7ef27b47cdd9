#include "pipeline/qwen_image_21_pipeline.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <utility>

#include "core/error.h"
#include "core/timer.h"
#include "io/json_text.h"
#include "model/lora_merge.h"

namespace ditbatch {

QwenImage21Pipeline::QwenImage21Pipeline(Backend& backend, const WeightStore& weights, const Log& log,
                                         std::shared_ptr<const WeightReader> reader)
    : be_(backend),
      weights_(weights),
      log_(log),
      reader_(reader ? std::move(reader) : std::make_shared<WeightReader>()) {
  check_configs(weights);  // a wrong file fails before any weight is read
  template_ = {weights.root_string("prompt_template"), weights.root_int("prompt_template_encode_start_idx")};
  sample_sigmas_ = sample_sigmas(weights);
  scheduler_ = model_scheduler_ = SchedulerConfig::from(weights.component("scheduler").config());
  tokenizer_ = std::make_unique<Tokenizer>(
      Tokenizer::from_files(reader_->files(weights.component("tokenizer")), weights.path() + ":/tokenizer"));
}

QwenImage21Pipeline::~QwenImage21Pipeline() = default;

std::vector<double> QwenImage21Pipeline::sample_sigmas(const WeightStore& weights) {
  const std::string text = weights.root_string("sample_sigmas");
  if (text.empty()) return {};
  nlohmann::json grid;
  try {
    grid = parse_json(text);
  } catch (const nlohmann::json::exception&) {
    grid = nullptr;
  }
  std::vector<double> sigmas;
  if (grid.is_array())
    for (const auto& s : grid)
      if (s.is_number() && std::isfinite(s.get<double>()) && s.get<double>() >= 0 && s.get<double>() <= 1)
        sigmas.push_back(s.get<double>());
  if (!grid.is_array() || sigmas.size() != grid.size() || sigmas.size() < 2)
    fail_input("{}: root attribute sample_sigmas = {}: expected a list of at least two numbers in [0, 1] (the "
               "pipeline's model_index.json sample_sigmas)",
               weights.path(), text);
  return sigmas;
}

void QwenImage21Pipeline::check_configs(const WeightStore& weights) {
  const Component dit = weights.component("transformer"), vae = weights.component("vae"),
                  text = weights.component("text_encoder");
  const Transformer21Config transformer = Transformer21Config::from(dit.config());
  const Vae21Config vae_config = Vae21Config::from(vae.config());
  const TextEncoderConfig text_config = TextEncoderConfig::from(text.config());
  check_block_counts(transformer.block_counts(), dit.tensor_names(), dit.where());
  check_block_counts(vae_config.block_counts(), vae.tensor_names(), vae.where());
  check_block_counts(text_config.block_counts(QwenTextEncoder::tensor_prefix(text)), text.tensor_names(), text.where());
  if (transformer.context_in_dim != text_config.hidden_size)
    fail_input("{}: transformer context_in_dim {} != text_encoder hidden_size {}", weights.path(),
               transformer.context_in_dim, text_config.hidden_size);
  if (transformer.out_channels != vae_config.z_dim || transformer.in_channels != vae_config.z_dim)
    fail_input("{}: transformer in_channels {} / out_channels {} != vae z_dim {}", weights.path(),
               transformer.in_channels, transformer.out_channels, vae_config.z_dim);
  SchedulerConfig::from(weights.component("scheduler").config());
  if (weights.root_string("prompt_template").find("{}") == std::string::npos ||
      !weights.root().has_attr("prompt_template_encode_start_idx"))
    fail_input("{}: no prompt template (root attributes prompt_template, prompt_template_encode_start_idx): convert "
               "the diffusers folder again with this ditbatch",
               weights.path());
  sample_sigmas(weights);
}

void QwenImage21Pipeline::load_text_encoder() {
  if (!text_encoder_) text_encoder_ = QwenTextEncoder::load(be_, weights_.component("text_encoder"), *reader_, log_);
}

PromptEmbedding QwenImage21Pipeline::encode_prompt(const std::string& prompt, const std::vector<InputImage>& images,
                                                   StageTimes* times) {
  DITBATCH_CHECK(images.empty(), "encode_prompt: {} takes no input image", "QwenImage21Pipeline");
  load_text_encoder();
  return encode_prompt_21(be_, *tokenizer_, template_, *text_encoder_, prompt, times);
}

void QwenImage21Pipeline::release_text_encoder() {
  if (text_encoder_) log_.info("text encoder released");
  text_encoder_.reset();
}

void QwenImage21Pipeline::use_loras(LoraSet loras) {
  DITBATCH_CHECK(!transformer_, "use_loras after the transformer loaded");
  loras_ = std::move(loras);
}

void QwenImage21Pipeline::use_scheduler(const SchedulerConfig& scheduler) { scheduler_ = scheduler; }

void QwenImage21Pipeline::load_denoiser() {
  if (transformer_ && vae_) return;
  Stopwatch load;
  const Component dit = weights_.component("transformer"), vae = weights_.component("vae");
  const std::unique_ptr<WeightBinder> file_binder = reader_->binder(dit);
  LoraMergingBinder binder(*file_binder, loras_, *reader_);
  transformer_ = std::make_unique<QwenImage21Transformer>(be_, Transformer21Config::from(dit.config()), binder);
  binder.check_all_merged();
  if (!loras_.empty()) {
    const double mb = static_cast<double>(binder.merged_params()) * static_cast<double>(dtype_size(be_.weight_dtype())) / 1e6;
    log_.info("LoRA: {} file(s) merged into {} linears ({:.1f} MB of weights) in {:.3f} s", loras_.files().size(),
              binder.merged_modules(), mb, binder.seconds());
  }
  vae_ = std::make_unique<QwenImage21VaeDecoder>(be_, Vae21Config::from(vae.config()), *reader_->binder(vae));
  log_.info("transformer ({} blocks, {} heads x {}) and VAE loaded in {:.1f} s", transformer_->config().num_layers,
            transformer_->config().num_attention_heads, transformer_->config().attention_head_dim, load.seconds());
}

GeneratedImage QwenImage21Pipeline::generate(const ImageJob& job, const PromptEmbedding& prompt,
                                             const PromptEmbedding* negative, const StepCallback& on_step,
                                             StageTimes& times) {
  load_denoiser();
  const int64_t S = (job.height / 16) * (job.width / 16);
  const Schedule schedule = sample_sigmas_.empty() ? make_schedule(scheduler_, static_cast<int>(job.steps), S)
                                                   : make_schedule_from_sigmas(scheduler_, sample_sigmas_, S);
  DITBATCH_CHECK(schedule.steps() == job.steps, "image {}: {} steps, but the checkpoint's sigma grid has {}", job.index,
                 job.steps, schedule.steps());
  return generate_21(be_, *transformer_, *vae_, job, schedule, prompt, negative, on_step, times);
}

}  // namespace ditbatch
