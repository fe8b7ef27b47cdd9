#include "pipeline/denoiser_setup.h"

#include <fmt/ranges.h>

#include <filesystem>

#include "core/error.h"
#include "core/fs.h"

namespace ditbatch {

SchedulerConfig resolve_scheduler(const SchedulerConfig& model, const std::string& name, const std::string& config_file) {
  if (!config_file.empty()) {
    if (name != "model")
      fail_input("--scheduler {} and --scheduler-config {}: give one of them (a config file says every setting)", name,
                 config_file);
    if (!std::filesystem::is_regular_file(config_file))
      fail_input("--scheduler-config {}: {}", config_file,
                 std::filesystem::exists(config_file) ? "is not a file" : "no such file");
    const SchedulerConfig config =
        SchedulerConfig::from(Config::parse(read_file(config_file), "--scheduler-config " + config_file));
    check_schedule(config, "--scheduler-config " + config_file);
    return config;
  }
  if (name == "model") return model;
  if (name == "lightning") return lightning_scheduler(model);
  fail_input("--scheduler '{}' (expected model, the weight file's, or lightning)", name);
}

DenoiserSetup DenoiserSetup::of(const LoraSet& loras, const SchedulerConfig& scheduler, const SchedulerConfig& model,
                                TextPositionMode positions) {
  return {loras.provenance(), scheduler.describe(), model.describe(),
          positions == TextPositionMode::Sequential ? "" : text_position_mode_name(positions)};
}

namespace {

std::string shown_loras(const nlohmann::json& loras) {
  if (!loras.is_array() || loras.empty()) return "none";
  std::vector<std::string> items;
  for (const auto& l : loras)
    items.push_back(l.is_object() && l.value("file", nlohmann::json()).is_string() && l.value("strength", nlohmann::json()).is_number()
                        ? fmt::format("{} {}", l["file"].get<std::string>(), l["strength"].get<double>())
                        : l.dump());
  return fmt::format("[{}]", fmt::join(items, ", "));
}

std::string stem(const std::string& file) { return std::filesystem::path(file).stem().string(); }

}  // namespace

std::vector<std::string> changed_denoiser_settings(const DenoiserSetup& setup, const nlohmann::json& record) {
  std::vector<std::string> changes;
  const nlohmann::json then = record.value("loras", nlohmann::json::array());  // none before LoRAs existed
  if (lora_set_key(then) != lora_set_key(setup.loras))
    changes.push_back(fmt::format("loras {}, now {}", shown_loras(then), shown_loras(setup.loras)));
  // A line of another tool's (or edited) may hold any JSON there: a scheduler that is no text is
  // another one (its JSON shown), never nlohmann's type_error ending the run.
  const auto recorded = record.find("scheduler");
  const std::string scheduler_then = recorded == record.end() ? setup.model_scheduler  // before schedulers were recorded
                                     : recorded->is_string()  ? recorded->get<std::string>()
                                                              : recorded->dump();
  if (scheduler_then != setup.scheduler) changes.push_back(fmt::format("scheduler {}, now {}", scheduler_then, setup.scheduler));
  const auto positions = record.find("text_positions");  // absent: sequential, the default
  const std::string positions_then = positions == record.end() ? ""
                                     : positions->is_string()  ? positions->get<std::string>()
                                                               : positions->dump();
  if (positions_then != setup.text_positions)
    changes.push_back(fmt::format("text_positions {}, now {}", positions_then.empty() ? "sequential" : positions_then,
                                  setup.text_positions.empty() ? "sequential" : setup.text_positions));
  return changes;
}

std::string a1111_lora_tags(const nlohmann::json& loras) {
  std::string tags;
  for (const auto& l : loras) tags += fmt::format(" <lora:{}:{}>", stem(l.value("file", "")), l.value("strength", 0.0));
  return tags;
}

std::string a1111_lora_hashes(const nlohmann::json& loras) {
  if (loras.empty()) return "";
  std::vector<std::string> items;
  for (const auto& l : loras)
    items.push_back(fmt::format("{}: {}", stem(l.value("file", "")), l.value("sha256", "").substr(0, 10)));
  return fmt::format(", Lora hashes: \"{}\"", fmt::join(items, ", "));
}

}  // namespace ditbatch
