// Loading the Qwen-Image MMDiT for a run, shared by the families that run it (text to image and
// the Edit pipelines): the LoRAs merged as each weight is read, and, given every image the process
// may make, their timesteps' conditioning computed while it loads where that holds less memory.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "core/backend.h"
#include "core/log.h"
#include "io/weight_store.h"
#include "model/lora.h"
#include "model/scheduler.h"
#include "model/transformer.h"
#include "pipeline/job.h"

namespace ditbatch {

// Every model time (t / 1000) the images' schedules step through, each once: what the
// transformer's conditioning at load covers.
std::vector<float> conditioning_timesteps(const SchedulerConfig& scheduler, const std::vector<ImageJob>& jobs);

// The transformer component of `weights` with `loras` merged. Without `jobs` it conditions each
// step; with them (none is a list too) it computes their timesteps' conditioning at load and
// keeps no modulation weights where QwenImageTransformer::conditioning_at_load_pays, and then
// refuses other schedules.
std::unique_ptr<QwenImageTransformer> load_qwen_image_transformer(Backend& be, const WeightStore& weights,
                                                                  const WeightReader& reader, const LoraSet& loras,
                                                                  const SchedulerConfig& scheduler,
                                                                  const std::optional<std::vector<ImageJob>>& jobs,
                                                                  const Log& log);

}  // namespace ditbatch
