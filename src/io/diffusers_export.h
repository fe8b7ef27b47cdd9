// A ditbatch weight file written back as the diffusers pipeline folder `convert` reads
// (model_index.json; transformer/, text_encoder/, vae/ with config.json and one .safetensors
// each; tokenizer/; scheduler/scheduler_config.json): the tensors' stored bytes and the configs
// verbatim, so that converting the folder gives a file of the same checksum. `bench convert`
// times that conversion on a folder of the real widths without the real checkpoint.
#pragma once

#include <cstdint>
#include <string>

#include "io/weight_store.h"

namespace ditbatch {

// Writes the folder `dir` (created; it must not exist yet). Returns the bytes of tensor data
// written.
int64_t export_diffusers_folder(const WeightStore& store, const std::string& dir);

}  // namespace ditbatch
