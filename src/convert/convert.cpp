#include "convert/convert.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "core/timer.h"
#include "io/json_text.h"
#include "io/safetensors.h"
#include "io/weight_store.h"
#include "model/qwen_image_21/constants.h"
#include "model/qwen_image_21/transformer.h"
#include "model/qwen_image_21/vae.h"
#include "model/qwen_image_constants.h"
#include "model/qwen_image_edit_constants.h"
#include "model/qwen_vl_vision.h"
#include "model/scheduler.h"
#include "model/text_encoder.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "model/vae.h"
#include "model/vae_encoder.h"

namespace ditbatch {
namespace fs = std::filesystem;

bool is_unused_text_encoder_tensor(const std::string& name) {
  return name.starts_with("visual.") || name.starts_with("model.visual.") || name.starts_with("lm_head.");
}

std::string stored_text_encoder_name(const std::string& name) {
  return name.starts_with("model.visual.") ? name.substr(std::string("model.").size()) : name;
}

namespace {

// A file (or subfolder) of the diffusers folder, read only where the folder is: the folder is the
// user's, and as root a link planted in it would have another user's file stored in the
// world-readable .h5. Its real path must lie inside the folder or, for a snapshot of the Hugging
// Face cache (.../snapshots/REV, whose files are links to ../../blobs/), in that cache's blobs/.
// A link loop, or a link to nothing, is said as such.
void check_inside_folder(const fs::path& root, const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;  // missing: the reader says so
  std::error_code ec;
  const fs::path target = fs::canonical(path, ec);
  if (ec) fail_input("{}: cannot be resolved ({}): a symbolic link loop, or a link to nothing", path, ec.message());
  const fs::path folder = fs::canonical(root);
  const auto inside = [&](const fs::path& dir) {
    const fs::path relative = target.lexically_relative(dir);
    return !relative.empty() && *relative.begin() != "..";
  };
  if (inside(folder) || (folder.parent_path().filename() == "snapshots" &&
                         inside(folder.parent_path().parent_path() / "blobs")))
    return;
  fail_input("{}: leads to {}, outside the pipeline folder {}: ditbatch reads a diffusers folder's files only inside it "
             "(or in its Hugging Face cache's blobs/)", path, target.string(), folder.string());
}

nlohmann::json parse_json_file(const fs::path& root, const std::string& path) {
  check_inside_folder(root, path);
  if (!file_exists(path)) fail_input("{}: missing (expected in a diffusers pipeline folder)", path);
  try {
    return parse_json(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: not valid JSON: {}", path, e.what());
  }
}

struct ModelComponent {
  std::string name, config_path, config_json;
  SafetensorsSet tensors;
};

// The pipeline classes convert reads: the folder their tokenizer is in, the prompt template and
// the number of its leading tokens dropped that the file records (the pipelines fix them in code),
// and whether the model reads the VAE's encoder (encoder.*, quant_conv.*: the Edit pipelines
// encode their input images), whose tensors are then checked like the decoder's.
struct FolderFamily {
  const char* pipeline_class;
  const char* models;
  const char* tokenizer_folder;
  const char* prompt_template;
  int drop_idx;  // 0: counted from the folder's tokenizer (Qwen-Image-2.1's system turn)
  bool keeps_vae_encoder;
  // Images in (Edit): the text encoder's vision tower (visual.*) is kept, and this folder's
  // preprocessor_config.json (the image processor's min/max_pixels, mean, std) is stored.
  const char* image_processor_folder = nullptr;
};
constexpr FolderFamily kFolderFamilies[] = {
    {"QwenImagePipeline", "Qwen-Image, Qwen-Image-2512", "tokenizer", kQwenImagePromptTemplate, kQwenImageDropIdx,
     false},
    {"QwenImage21Pipeline", "Qwen-Image-2.1", "processor", kQwenImage21PromptTemplate, 0, false},
    {"QwenImageEditPipeline", "Qwen-Image-Edit", "tokenizer", kQwenImageEditPromptTemplate, kQwenImageEditDropIdx,
     true, "processor"},
    {"QwenImageEditPlusPipeline", "Qwen-Image-Edit-2509, Qwen-Image-Edit-2511", "tokenizer",
     kQwenImageEditPlusPromptTemplate, kQwenImageEditDropIdx, true, "processor"},
};

const FolderFamily& folder_family(const std::string& pipeline_class, const std::string& folder) {
  for (const FolderFamily& f : kFolderFamilies)
    if (pipeline_class == f.pipeline_class) return f;
  // Another family's folder (Qwen-Image-Edit, ...) has other components and tensors: refused
  // here, not converted into a file that fails later.
  std::string known;
  for (const FolderFamily& f : kFolderFamilies)
    known += fmt::format("{}{} ({})", known.empty() ? "" : ", ", f.pipeline_class, f.models);
  fail_input("{}/model_index.json: _class_name '{}': ditbatch converts {} folders", folder, pipeline_class, known);
}

// Text-encoder tensors the family's pipeline never reads, left out of the file: the LM head, and
// the vision tower of a text-only family.
bool unused_text_encoder_tensor(const std::string& name, const std::string& pipeline_class) {
  return reads_images(pipeline_class) ? name.starts_with("lm_head.") : is_unused_text_encoder_tensor(name);
}

// Where the vision tower's tensors are: "visual." (checkpoint names) or "model.visual."
// (transformers >= 4.52 in-memory names); both are stored as "visual.".
std::string vision_tensor_prefix(const std::function<bool(const std::string&)>& has_tensor, const std::string& where) {
  for (const char* prefix : {"visual.", "model.visual."})
    if (has_tensor(std::string(prefix) + "patch_embed.proj.weight")) return prefix;
  fail_input("{}: no visual.patch_embed.proj.weight (nor model.visual.*): an Edit pipeline's text encoder needs its "
             "Qwen2.5-VL vision tower", where);
}

}  // namespace

bool reads_images(const std::string& pipeline_class) {
  for (const FolderFamily& f : kFolderFamilies)
    if (pipeline_class == f.pipeline_class) return f.image_processor_folder != nullptr;
  return false;
}

bool keeps_vae_encoder(const std::string& pipeline_class) {
  for (const FolderFamily& f : kFolderFamilies)
    if (pipeline_class == f.pipeline_class) return f.keeps_vae_encoder;
  return false;
}

void check_component_tensors(const std::string& component, const std::string& config_path,
                             const std::string& config_json, const SafetensorsSet& tensors,
                             const std::string& folder, const std::string& pipeline_class) {
  for (const auto& item : tensors.items()) {
    DType t = item.entry->dtype;
    if (!is_float(t) && !(component == "text_encoder" && unused_text_encoder_tensor(item.entry->name, pipeline_class)))
      fail_input("{}: tensor '{}' has dtype {}; model weights must be F32, BF16 or F16", item.file->path(),
                 item.entry->name, dtype_name(t));
  }
  const Config config = Config::parse(config_json, config_path);
  std::map<std::string, const SafetensorsSet::Item*> by_name;
  for (const auto& item : tensors.items()) by_name[item.entry->name] = &item;
  std::vector<std::string> names;
  for (const auto& [name, item] : by_name) names.push_back(name);
  const std::string where = folder + "/" + component;
  // Block counts first: the spec lists below hold one entry per tensor the config implies.
  std::vector<WeightSpec> specs;
  const bool v21 = pipeline_class == "QwenImage21Pipeline";
  if (component == "transformer" && v21) {
    const Transformer21Config c = Transformer21Config::from(config);
    check_block_counts(c.block_counts(), names, where);
    specs = QwenImage21Transformer::weight_specs(c);
  } else if (component == "transformer") {
    const TransformerConfig c = TransformerConfig::from(config);
    check_block_counts(c.block_counts(), names, where);
    specs = QwenImageTransformer::weight_specs(c);
  } else if (component == "vae" && v21) {
    const Vae21Config c = Vae21Config::from(config);
    check_block_counts(c.block_counts(), names, where);
    specs = QwenImage21VaeDecoder::weight_specs(c);
  } else if (component == "vae") {
    const VaeConfig c = VaeConfig::from(config);
    check_block_counts(c.block_counts(), names, where);
    specs = VaeDecoder::weight_specs(c);
    if (keeps_vae_encoder(pipeline_class)) {
      const std::vector<WeightSpec> encoder = VaeEncoder::weight_specs(c);
      specs.insert(specs.end(), encoder.begin(), encoder.end());
    }
  } else {
    const std::string prefix =
        QwenTextEncoder::tensor_prefix([&](const std::string& name) { return by_name.count(name) > 0; }, where);
    const TextEncoderConfig c = TextEncoderConfig::from(config);
    check_block_counts(c.block_counts(prefix), names, where);
    specs = QwenTextEncoder::weight_specs(c, prefix);
    if (reads_images(pipeline_class)) {
      const std::string visual = vision_tensor_prefix([&](const std::string& name) { return by_name.count(name) > 0; },
                                                      where);
      const VisionConfig vision = VisionConfig::from(config);
      check_block_counts(vision.block_counts(visual), names, where);
      for (WeightSpec& spec : QwenVisionTower::weight_specs(vision, visual)) specs.push_back(std::move(spec));
    }
  }
  std::vector<std::string> missing;
  for (const WeightSpec& spec : specs) {
    const auto it = by_name.find(spec.name);
    if (it == by_name.end()) {
      missing.push_back(spec.name);
      continue;
    }
    const SafetensorsEntry& e = *it->second->entry;
    if (e.shape != spec.shape)
      fail_input("{}: tensor '{}' has shape {}, but {}/config.json makes the model expect {}{}{}",
                 it->second->file->path(), spec.name, shape_str(e.shape), component, shape_str(spec.shape),
                 spec.why.empty() ? "" : " from ", spec.why);
  }
  if (!missing.empty())
    fail_input("{}/{}: {} of the {} tensors the model reads are missing: {}{} (is this a complete {} {}?)",
               folder, component, missing.size(), specs.size(),
               fmt::join(missing.begin(), missing.begin() + std::min<size_t>(missing.size(), 5), ", "),
               missing.size() > 5 ? fmt::format(" and {} more", missing.size() - 5) : "",
               v21 ? "Qwen-Image-2.1" : "Qwen-Image", component);
}

namespace {

DType target_dtype(const std::string& option, DType stored) {
  if (option == "keep") return stored;
  if (option == "bf16") return DType::BF16;
  if (option == "fp32" || option == "f32") return DType::F32;
  if (option == "fp16" || option == "f16") return DType::F16;
  fail_input("--dtype '{}' (expected keep, bf16, fp16 or fp32)", option);
}

}  // namespace

void check_output_file(const std::string& path, const std::vector<std::string>& inputs) {
  const fs::path p(path);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    fail_input("{}: is a folder; name the file to write in it, e.g. {}", path, (p / "qwen-image.h5").string());
  check_weight_file_target(path);
  const fs::path dir = p.parent_path();
  if (!dir.empty() && !fs::is_directory(dir))
    fail_input("{}: the folder {} does not exist", path, dir.string());
  struct stat out {};
  if (::stat(path.c_str(), &out) != 0) return;
  for (const std::string& input : inputs) {  // the same file by any name: a link, a hard link
    struct stat in {};
    if (::stat(input.c_str(), &in) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino)
      fail_input("{}: is {}{}, an input of this conversion: writing it would destroy its source; name another path",
                 path, input, input == path ? "" : " (the same file)");
  }
}

ConvertStats convert_diffusers(const ConvertOptions& opt, const Log& log) {
  Stopwatch watch;
  const fs::path root(opt.from);
  if (!fs::is_directory(root)) fail_input("{}: not a directory (expected a diffusers pipeline folder)", opt.from);
  target_dtype(opt.dtype, DType::F32);  // validates the option before any work
  check_output_file(opt.to);

  // ---- validate everything first: nothing is written for a folder that cannot convert ----
  nlohmann::json index = parse_json_file(root, (root / "model_index.json").string());
  if (!index.is_object())
    fail_input("{}/model_index.json: is {} {}, not the JSON object of a diffusers pipeline folder", opt.from,
               index.type_name(), json_excerpt(index));
  const std::string pipeline_class = index.value("_class_name", "");
  const FolderFamily& family = folder_family(pipeline_class, opt.from);
  // Qwen-Image-2.1 Turbo's fixed sigma grid (null in the base checkpoint): kept as given.
  std::string sample_sigmas;
  if (index.contains("sample_sigmas") && !index["sample_sigmas"].is_null()) {
    const nlohmann::json& grid = index["sample_sigmas"];
    if (!grid.is_array() || grid.empty() ||
        !std::all_of(grid.begin(), grid.end(), [](const nlohmann::json& v) { return v.is_number(); }))
      fail_input("{}/model_index.json: sample_sigmas {}: expected null or a list of numbers", opt.from, json_excerpt(grid));
    sample_sigmas = grid.dump();
  }
  std::vector<ModelComponent> models;
  for (const char* name : {"transformer", "text_encoder", "vae"}) {
    ModelComponent m;
    m.name = name;
    m.config_path = (root / name / "config.json").string();
    check_inside_folder(root, (root / name).string());
    parse_json_file(root, m.config_path);
    m.config_json = read_file(m.config_path);
    m.tensors = SafetensorsSet::open_dir((root / name).string());
    for (const std::string& file : m.tensors.files()) check_inside_folder(root, file);
    check_component_tensors(m.name, m.config_path, m.config_json, m.tensors, opt.from, pipeline_class);
    models.push_back(std::move(m));
  }
  const std::string scheduler_config_path = (root / "scheduler" / "scheduler_config.json").string();
  parse_json_file(root, scheduler_config_path);
  // Checked as generate will read it: a config generate refuses is refused here, before writing.
  check_schedule(SchedulerConfig::from(Config::parse(read_file(scheduler_config_path), scheduler_config_path)),
                 scheduler_config_path);
  const fs::path tokenizer_dir = root / family.tokenizer_folder;
  check_inside_folder(root, tokenizer_dir.string());
  if (!fs::is_directory(tokenizer_dir)) fail_input("{}: missing the {}/ folder", opt.from, family.tokenizer_folder);
  // Read once (what is checked is what is written), and only the files the tokenizer reads:
  // anything else in the folder (a README, a 50 MB stray file) stays out of the .h5.
  TokenizerFiles tokenizer_files;
  for (const std::string& name : Tokenizer::file_names()) {
    const std::string path = (tokenizer_dir / name).string();
    check_inside_folder(root, path);
    if (file_exists(path)) tokenizer_files[name] = read_file(path);
  }
  bool has_vocab = tokenizer_files.count("tokenizer.json") ||
                   (tokenizer_files.count("vocab.json") && tokenizer_files.count("merges.txt"));
  if (!has_vocab) fail_input("{}: needs vocab.json + merges.txt (or tokenizer.json)", tokenizer_dir.string());
  // Loaded as generate will load it: an empty or cut merges.txt, an empty tokenizer.json fail now.
  Tokenizer tokenizer = Tokenizer::from_files(tokenizer_files, tokenizer_dir.string());
  // The leading tokens the pipeline drops: Qwen-Image's fixed 34; Qwen-Image-2.1 counts its
  // system turn's tokens with the folder's own tokenizer.
  const int64_t drop_idx =
      family.drop_idx > 0 ? int64_t{family.drop_idx} : std::ssize(tokenizer.encode(qwen_image_21_system_turn()));
  // The image processor's settings (max_pixels decides the vision token count): read as JSON now, stored verbatim.
  std::string preprocessor_config_path, preprocessor_config;
  if (family.image_processor_folder) {
    preprocessor_config_path = (root / family.image_processor_folder / "preprocessor_config.json").string();
    check_inside_folder(root, (root / family.image_processor_folder).string());
    if (!parse_json_file(root, preprocessor_config_path).is_object())
      fail_input("{}: not a JSON object (expected the image processor's settings)", preprocessor_config_path);
    preprocessor_config = read_file(preprocessor_config_path);
  }

  std::vector<std::string> inputs = {(root / "model_index.json").string(), scheduler_config_path};
  for (const auto& m : models) {
    inputs.push_back(m.config_path);
    for (const std::string& file : m.tensors.files()) inputs.push_back(file);
    for (const auto& e : fs::directory_iterator(root / m.name))  // a shard index, too
      inputs.push_back(e.path().string());
  }
  for (const auto& [name, bytes] : tokenizer_files) inputs.push_back((tokenizer_dir / name).string());
  if (!preprocessor_config_path.empty()) inputs.push_back(preprocessor_config_path);
  check_output_file(opt.to, inputs);

  double total_bytes = 0;
  int64_t total_tensors = 0;
  for (const auto& m : models)
    for (const auto& item : m.tensors.items())
      if (!(m.name == "text_encoder" && unused_text_encoder_tensor(item.entry->name, pipeline_class))) {
        total_bytes += static_cast<double>(item.entry->end - item.entry->begin);
        ++total_tensors;
      }
  log.info("converting {} -> {}: {} tensors, {:.2f} GB, dtype {}", opt.from, opt.to, total_tensors, total_bytes / 1e9,
           opt.dtype);

  // ---- stream ----
  ConvertStats stats;
  stats.validate_seconds = watch.seconds();
  for (const std::string& orphan :
       remove_orphaned_temp_files(fs::path(opt.to).parent_path().string(), fs::path(opt.to).filename().string()))
    log.info("removed {} (left by an interrupted conversion)", orphan);
  if (fs::is_symlink(opt.to))
    log.info("{} is a symbolic link: the link is replaced by the new file when the conversion completes (the file "
             "it points to is left as it is)",
             opt.to);
  else if (file_exists(opt.to))
    log.info("{} exists: it is replaced when the conversion completes", opt.to);
  WeightWriter writer(opt.to);
  // No more readable than its inputs: a weight file of files only their owner may read is too.
  unsigned readable = 0777;
  for (const std::string& input : inputs) {
    struct stat in {};
    if (::stat(input.c_str(), &in) == 0) readable &= in.st_mode & 0777;
  }
  writer.restrict_permissions(readable);
  std::string model_name = opt.model_name;
  if (model_name.empty()) model_name = index.value("_name_or_path", "");
  if (model_name.empty()) model_name = fs::absolute(root).lexically_normal().filename().string();
  if (model_name.empty()) model_name = fs::absolute(root).lexically_normal().parent_path().filename().string();
  writer.set_root_attr("model_name", model_name);
  writer.set_root_attr("source", fs::absolute(root).lexically_normal().string());
  writer.set_root_attr("pipeline_class", pipeline_class);
  writer.set_root_attr("prompt_template", std::string(family.prompt_template));
  writer.set_root_attr("prompt_template_encode_start_idx", drop_idx);
  if (!sample_sigmas.empty()) writer.set_root_attr("sample_sigmas", sample_sigmas);

  Stopwatch since_report;
  std::vector<char> converted;
  std::vector<float> as_f32;
  for (const auto& m : models) {
    writer.begin_component(m.name, m.config_json);
    for (const auto& item : m.tensors.items()) {
      const SafetensorsEntry& e = *item.entry;
      if (m.name == "text_encoder" && unused_text_encoder_tensor(e.name, pipeline_class)) {
        ++stats.skipped;
        continue;
      }
      const DType out = target_dtype(opt.dtype, e.dtype);
      const void* src = item.file->data(e);
      const size_t n = static_cast<size_t>(shape_numel(e.shape));
      // A NaN or Inf weight makes every image NaN: refused by name (the temporary file goes).
      if (const int64_t at = first_non_finite(src, e.dtype, n); at >= 0)
        fail_input("{}: tensor '{}' of the {} holds a NaN or infinite value at element {} of {}: a broken "
                   "checkpoint (ditbatch converts finite weights only)",
                   item.file->path(), e.name, m.name, at, n);
      const std::string stored_name = m.name == "text_encoder" ? stored_text_encoder_name(e.name) : e.name;
      if (out == e.dtype) {
        writer.add_tensor(stored_name, e.shape, out, src);
      } else {
        as_f32.resize(n);
        convert_to_f32(src, e.dtype, as_f32.data(), n);
        converted.resize(n * dtype_size(out));
        convert_from_f32(as_f32.data(), converted.data(), out, n);
        if (const int64_t at = first_non_finite(converted.data(), out, n); at >= 0)
          fail_input("{}: tensor '{}' of the {}: element {} ({}) is past the range of --dtype {}; convert to a wider "
                     "type (bf16, f32)",
                     item.file->path(), e.name, m.name, at, as_f32[static_cast<size_t>(at)], opt.dtype);
        writer.add_tensor(stored_name, e.shape, out, converted.data());
      }
      item.file->release(e);
      ++stats.tensors;
      stats.bytes_read += static_cast<double>(e.end - e.begin);
      stats.bytes_written += static_cast<double>(n * dtype_size(out));
      if (since_report.seconds() > 2.0 || stats.tensors == total_tensors) {
        log.info("  {}/{} tensors, {:.2f}/{:.2f} GB, {:.2f} GB/s", stats.tensors, total_tensors, stats.bytes_read / 1e9,
                 total_bytes / 1e9, stats.bytes_read / 1e9 / std::max(1e-9, watch.seconds()));
        since_report.restart();
      }
    }
    writer.end_component();
    // Large conversion buffers are not needed past the biggest tensor of a component.
    std::vector<char>().swap(converted);
    std::vector<float>().swap(as_f32);
  }
  writer.begin_component("tokenizer", "");
  for (const auto& [name, bytes] : tokenizer_files) writer.add_file(name, bytes);
  writer.end_component();
  writer.begin_component("scheduler", read_file(scheduler_config_path));
  writer.end_component();
  if (!preprocessor_config.empty()) {
    writer.begin_component("processor", preprocessor_config);
    writer.end_component();
  }
  stats.stream_seconds = watch.seconds() - stats.validate_seconds;
  writer.finish();
  stats.seconds = watch.seconds();
  stats.finish_seconds = stats.seconds - stats.validate_seconds - stats.stream_seconds;
  log.info("wrote {} ({} tensors, {} skipped, {:.2f} GB in {:.1f} s)", opt.to, stats.tensors, stats.skipped,
           stats.bytes_written / 1e9, stats.seconds);
  return stats;
}

}  // namespace ditbatch
