#include <filesystem>
#include <iostream>
#include <map>

#include "app/commands.h"
#include "app/inspect_outputs.h"
#include "app/options.h"
#include <fmt/format.h>

#include "core/error.h"
#include "io/json_text.h"
#include "io/weight_store.h"
#include "model/prompt_tokens.h"
#include "pipeline/memory_plan.h"
#include "pipeline/image_model.h"

namespace ditbatch {

namespace {

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000.0 && u < 4) bytes /= 1000.0, ++u;
  return fmt::format("{:.{}f} {}", bytes, u == 0 ? 0 : 2, units[u]);
}

void print_config(const Config& config) {
  for (auto it = config.json().begin(); it != config.json().end(); ++it) {
    std::string value = it.value().dump();
    if (value.size() > 100) value = value.substr(0, 97) + "...";
    std::cout << "      " << it.key() << " = " << value << "\n";
  }
}

}  // namespace

int cmd_inspect(const std::vector<std::string>& args) {
  std::string path;
  bool list_tensors = false;
  po::options_description desc("options");
  desc.add_options()
      ("file", po::value(&path)->required(), "the ditbatch .h5, or the --out folder of a generate run")
      ("tensors", po::bool_switch(&list_tensors), "list every tensor with its dtype and shape");
  po::positional_options_description positional;
  positional.add("file", 1);
  po::variables_map vm;
  if (!parse_options("inspect", "FILE.h5 [--tensors] | DIR",
                     "Shows the components, configs and tensors of a weight file; or what a generate output folder\n"
                     "holds (images ok and failed, layout, files changed or missing by their stat, models,\n"
                     "settings, runs), read from its manifest without reading an image.",
                     desc, &positional, args, vm))
    return 0;
  if (std::filesystem::is_directory(path)) return inspect_output_folder(path);
  WeightStore store = WeightStore::open(path);
  std::cout << path << " (" << human_bytes(static_cast<double>(std::filesystem::file_size(path))) << ")\n";
  for (const char* attr : {"model_name", "source", "created_by", "pipeline_class", "checksum"})
    std::cout << "  " << attr << ": " << store.root_string(attr, "-") << "\n";
  std::cout << "  format_version: " << store.root_int("format_version") << "\n";
  // The rest of the root attributes (what the checksum covers besides configs and tensors).
  const std::vector<std::string> shown = {"model_name", "source", "created_by", "pipeline_class", "checksum",
                                          "format_version"};
  for (const std::string& attr : store.root().attr_names()) {
    if (std::find(shown.begin(), shown.end(), attr) != shown.end() ||
        (attr.starts_with("checksum.") && attr != "checksum.root"))
      continue;
    const std::string text = store.root().attr_text(attr);
    std::string value = text.starts_with("s:") ? text.substr(2) : text.substr(text.find(':') + 1);
    for (char& c : value) if (c == '\n') c = ' ';
    std::cout << "  " << attr << ": " << text_excerpt(value, 100) << "\n";
  }
  int64_t total_params = 0;
  for (const auto& name : store.components()) {
    Component comp = store.component(name);
    std::vector<std::string> tensors = comp.tensor_names();
    std::cout << "\n[" << name << "]\n";
    std::cout << "    checksum: " << store.root_string("checksum." + name, "-") << "\n";
    if (name == "tokenizer") {
      for (const auto& file : tensors)
        std::cout << "    file " << file << " (" << human_bytes(static_cast<double>(comp.tensor_info(file).shape[0]))
                  << ")\n";
      continue;
    }
    std::map<std::string, int64_t> by_dtype;
    int64_t params = 0;
    double bytes = 0;
    for (const auto& t : tensors) {
      h5::DatasetInfo info = comp.tensor_info(t);
      const int64_t n = shape_numel(info.shape);
      params += n;
      bytes += static_cast<double>(n) * static_cast<double>(dtype_size(info.dtype));
      ++by_dtype[std::string(dtype_name(info.dtype))];
    }
    total_params += params;
    if (!tensors.empty()) {
      std::cout << "    tensors: " << tensors.size() << ", parameters: " << params << " (" << fmt::format("{:.3f}", params / 1e9)
                << " B), " << human_bytes(bytes) << ", dtypes:";
      for (const auto& [dt, count] : by_dtype) std::cout << " " << dt << " x" << count;
      std::cout << "\n";
    }
    std::cout << "    config:\n";
    print_config(comp.config());
    if (list_tensors)
      for (const auto& t : tensors) {
        h5::DatasetInfo info = comp.tensor_info(t);
        std::cout << "    " << t << " " << dtype_name(info.dtype) << shape_str(info.shape) << "\n";
      }
  }
  std::cout << "\ntotal parameters: " << total_params << "\n";
  if (store.has_component("transformer") && store.has_component("text_encoder") && store.has_component("vae") &&
      store.has_component("scheduler")) {
    // What `generate` will ask of a GPU (bf16 weights), to pick a GPU type before queueing.
    try {
      const SchedulerConfig scheduler = SchedulerConfig::from(store.component("scheduler").config());
      const std::unique_ptr<ImageModel> model = ImageModel::open(store);
      const GenerationDefaults defaults = model->generation_defaults();
      const std::string size = defaults.size_from_input_images
                                   ? std::string("the last input image's aspect at about 1024x1024")
                                   : fmt::format("{}x{}", defaults.width, defaults.height);
      std::cout << fmt::format("generate's defaults ({}): {}, {} steps, {}\n", model->family(), size, defaults.steps,
                               defaults.cfg > 1 ? fmt::format("true CFG {}", defaults.cfg) : std::string("CFG off"));
      if (model->max_input_images() > 0)
        std::cout << fmt::format("input images per prompt line: {}..{}\n", model->min_input_images(),
                                 model->max_input_images());
      std::cout << fmt::format("GPU memory for generate (bf16, {} steps, estimate):\n", defaults.steps);
      for (const int64_t side : {1024, 1328}) {
        ImageJob job;  // the model card's steps and CFG, a prompt of up to 64 tokens
        job.width = job.height = side / defaults.size_multiple * defaults.size_multiple;
        job.steps = defaults.steps;
        job.cfg = static_cast<float>(defaults.cfg);
        job.true_cfg = defaults.cfg > 1;
        const int64_t limit = model->default_max_sequence_length();
        const DeviceMemoryPlan plan = model->device_memory(2, {job}, limit > 0 ? limit : 64, scheduler);
        // An edit model's estimate counts one input image of the output's size.
        const std::string label = fmt::format("{}x{}{}", job.width, job.height,
                                              model->max_input_images() > 0 ? " from one input of that size" : "");
        std::cout << fmt::format("  {}: {}\n  {} with --offload-text-encoder: {}\n", label, plan.describe(false), label,
                                 plan.describe(true));
      }
    } catch (const InputError& e) {  // configs generate would refuse too: say why, inspect goes on
      std::cout << "  (no estimate: " << e.what() << ")\n";
    }
  }
  return 0;
}

}  // namespace ditbatch
