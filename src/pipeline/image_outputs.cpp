#include "pipeline/image_outputs.h"

#include "core/build_info.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/sha256.h"
#include "io/h5.h"

namespace ditbatch {

std::string build_version() { return fmt::format("ditbatch {} ({})", DITBATCH_VERSION, build_commit()); }

void write_latents_file(const std::string& path, const ImageJob& job, const Tensor& latents) {
  TempFile tmp(path, false);  // removed unless committed: a full disk leaves nothing behind
  h5::File f = h5::File::create_exclusive(tmp.path());
  {
    h5::Group root = f.root();
    root.write_tensor("latents", latents.view({1, latents.dim(0), latents.dim(1)}));  // diffusers' [B, S, 64]
    root.set_attr("seed", static_cast<int64_t>(job.seed));
    root.set_attr("height", job.height);
    root.set_attr("width", job.width);
    root.set_attr("steps", job.steps);
  }
  f.close_checked();  // with nothing else open, so that HDF5 writes what it buffers now, and says if it cannot
  tmp.commit();
}

FileStat written_file_stat(const std::string& path) {
  const std::optional<FileStat> st = stat_regular_file(path);
  if (!st) fail("{}: is gone right after it was written", path);
  return *st;
}

// The sample's .json is the manifest line less where the PNG lies.
void write_sample_record(const std::string& out_dir, const ImageJob& job, ImageRecord& record) {
  const std::string text = record.sample_text();
  const std::string path = out_dir + "/" + job.file(".json");
  write_file_atomic(path, text);
  record.json_file = job.file(".json");
  record.json_sha256 = sha256_hex(text);
  record.json_file_stat = written_file_stat(path);
}

OutputProvenance OutputProvenance::from(const WeightStore& weights, const ImageGenerator& pipeline) {
  return {weights.model_name(), weights.checksum(), pipeline.max_sequence_length(),
          DenoiserSetup::of(pipeline.loras(), pipeline.scheduler_config(), pipeline.model_scheduler_config(),
                            pipeline.text_positions())};
}

std::string png_path(const std::string& out_dir, const ImageJob& job) { return out_dir + "/" + job.file(); }

ImageRecord image_record_of(const ImageJob& job) {
  ImageRecord r;
  r.index = job.index;
  r.prompt = job.prompt;
  r.negative_prompt = job.negative_prompt_used();
  r.seed = job.seed;
  r.width = job.width;
  r.height = job.height;
  r.steps = job.steps;
  r.cfg = job.cfg_used();
  r.true_cfg = job.true_cfg;
  r.file = job.file();
  r.input_images = input_images_json(job);
  return r;
}

nlohmann::json input_images_json(const ImageJob& job) {
  nlohmann::json list = nlohmann::json::array();
  for (const InputImage& image : job.images) list.push_back({{"path", image.path}, {"sha256", image.sha256}});
  return list;
}

std::string a1111_input_images(const nlohmann::json& input_images) {
  if (input_images.empty()) return "";
  std::vector<std::string> items;
  for (const auto& image : input_images)
    items.push_back(fmt::format("{}: {}", image.value("path", ""), image.value("sha256", "").substr(0, 10)));
  // quoted as A1111 quotes a value holding commas or colons (a JSON string)
  return ", Input images: " + nlohmann::json(fmt::format("{}", fmt::join(items, ", "))).dump();
}

PngText png_metadata(const ImageRecord& r) {
  DITBATCH_CHECK(r.prompt_tokens.has_value(), "image {}: a PNG is written once its prompt is encoded", r.index);
  const float cfg = static_cast<float>(r.cfg);  // as the job held it: 4.1, not 4.099999904632568
  std::string parameters = r.prompt + a1111_lora_tags(r.loras) + "\n";
  if (r.true_cfg) parameters += "Negative prompt: " + r.negative_prompt + "\n";
  parameters += fmt::format("Steps: {}, Sampler: FlowMatchEulerDiscrete, CFG scale: {}, Seed: {}, Size: {}x{}, "
                            "Model hash: {}, Model: {}{}, Version: {}",
                            r.steps, cfg, r.seed, r.width, r.height, r.model_checksum.substr(0, 10), r.model,
                            a1111_lora_hashes(r.loras) + a1111_input_images(r.input_images) +
                                (r.text_positions.empty() ? "" : ", Text positions: " + r.text_positions),
                            build_version());
  PngText text = {{"parameters", parameters},
          {"prompt", r.prompt},
          {"negative_prompt", r.negative_prompt},
          {"seed", std::to_string(r.seed)},
          {"steps", std::to_string(r.steps)},
          {"cfg", fmt::format("{}", cfg)},
          {"size", fmt::format("{}x{}", r.width, r.height)},
          {"scheduler", r.scheduler},
          {"loras", r.loras.dump()},
          {"model", r.model},
          {"model_checksum", r.model_checksum}};
  if (r.max_sequence_length) text.emplace_back("max_sequence_length", std::to_string(*r.max_sequence_length));
  if (!r.input_images.empty()) text.emplace_back("input_images", r.input_images.dump());
  if (!r.text_positions.empty()) text.emplace_back("text_positions", r.text_positions);
  text.emplace_back("software", build_version());
  return text;
}

}  // namespace ditbatch
