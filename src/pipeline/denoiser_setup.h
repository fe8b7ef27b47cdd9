// What an image's denoiser was set up with beyond the weight file: the LoRAs merged into the
// transformer (--lora), the scheduler that steps it (the weight file's, --scheduler lightning or
// --scheduler-config FILE), and for an edit how its text encoder numbered the image tokens
// (--text-positions). Part of every image's record (PNG text, manifest line) and of the
// resume check: a rerun with other LoRAs or another scheduler is refused like any other setting.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "model/lora.h"
#include "model/scheduler.h"
#include "model/text_positions.h"

namespace ditbatch {

// --scheduler NAME ("model": the weight file's; "lightning") or --scheduler-config FILE (a diffusers
// scheduler_config.json), at most one of them, over the weight file's scheduler `model`.
SchedulerConfig resolve_scheduler(const SchedulerConfig& model, const std::string& name, const std::string& config_file);

struct DenoiserSetup {
  nlohmann::json loras = nlohmann::json::array();  // LoraSet::provenance(): file, sha256, strength
  std::string scheduler;                           // SchedulerConfig::describe() of the one used
  std::string model_scheduler;                     // the weight file's (a record made before a
                                                   // scheduler was recorded was made with it)
  // The text encoder's positions for an edit's image tokens: "" for the default (sequential, and
  // every text-to-image prompt), "mrope" where --text-positions asks for it. Recorded only then.
  std::string text_positions;
  static DenoiserSetup of(const LoraSet& loras, const SchedulerConfig& scheduler, const SchedulerConfig& model,
                          TextPositionMode positions = TextPositionMode::Sequential);
};

// One item per setting a manifest line was made with that `setup` would make differently:
// "loras [style.safetensors 0.7], now none". The order of the LoRAs does not matter (they merge in
// one fixed order), their file names neither: only what they hold (sha256) and their strengths.
std::vector<std::string> changed_denoiser_settings(const DenoiserSetup& setup, const nlohmann::json& record);
// A1111's way to name LoRAs in "parameters": " <lora:style:0.7>" after the prompt, and
// ", Lora hashes: \"style: 1a2b3c4d5e\"" among the settings (empty without LoRAs), from the
// LoRAs as recorded (DenoiserSetup::loras).
std::string a1111_lora_tags(const nlohmann::json& loras);
std::string a1111_lora_hashes(const nlohmann::json& loras);

}  // namespace ditbatch
