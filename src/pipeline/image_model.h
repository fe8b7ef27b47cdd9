// The model seam, half two: a weight file's model family, its configs parsed and checked against
// the tensors the file holds, nothing loaded. It answers what generate, inspect, bench and
// selftest ask before any weight is read (the memory and time a run needs, the LoRAs it can
// take) and makes the family's ImageGenerator (pipeline/image_generator.h). The family is the
// file's pipeline class (the root attribute `pipeline_class` that convert copies from
// model_index.json), never a flag the user must remember.
//
// Adding a family: its models in model/, its ImageModel and ImageGenerator in pipeline/, one
// line in image_model.cpp's table; the batch machinery is unchanged.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/log.h"
#include "io/weight_store.h"
#include "model/lora.h"
#include "model/scheduler.h"
#include "pipeline/host_plan.h"
#include "pipeline/image_generator.h"
#include "pipeline/job.h"
#include "pipeline/memory_plan.h"

namespace ditbatch {

class ImageModel {
 public:
  virtual ~ImageModel() = default;

  // The family of `weights` (which must outlive the model), its configs checked: a file of a
  // pipeline class ditbatch does not run, or whose configs disagree with its tensors, is an
  // InputError naming it, before anything is allocated for it.
  static std::unique_ptr<ImageModel> open(const WeightStore& weights);
  // The pipeline classes ditbatch runs ("QwenImagePipeline", ...), for messages.
  static std::vector<std::string> pipeline_classes();

  virtual std::string pipeline_class() const = 0;
  // The family as its users name it, for messages ("Qwen-Image-2.1").
  virtual std::string family() const = 0;
  // The model card's settings (size, steps, CFG, negative prompt) and the sizes and steps the
  // pipeline takes: what a run uses where neither the command line nor a prompt line says.
  virtual GenerationDefaults generation_defaults() const = 0;
  // The prompt tokens the text encoder's output keeps at most unless told otherwise (diffusers'
  // max_sequence_length default); 0 where the family encodes the whole prompt and takes no limit.
  virtual int64_t default_max_sequence_length() const = 0;
  // The largest limit the family's pipeline allows (0: it takes none).
  virtual int64_t max_sequence_length_limit() const = 0;
  // How many input images a prompt line gives the family's pipeline: none for text-to-image,
  // one or more for an edit model (checked with the prompts, before any weight is read).
  virtual int min_input_images() const { return 0; }
  virtual int max_input_images() const { return 0; }
  // Once a job's input images are inspected (their upright sizes known): refuses an image the
  // family cannot take (an aspect its resizes round to nothing), and gives a side the prompt line
  // and the command line left to the images (0, where GenerationDefaults::size_from_input_images)
  // the size the family's pipeline takes from them. Reads no file.
  virtual void settle_input_images(ImageJob& /*job*/) const {}

  // The --scheduler presets the family takes besides "model" (the weight file's).
  virtual std::vector<std::string> scheduler_presets() const { return {}; }

  // The LoRA files of a run, each read and checked against this model's denoiser.
  virtual LoraSet open_loras(const std::vector<LoraRequest>& requests) const = 0;

  // What a run of `jobs` holds on a GPU whose weights take weight_dtype_size bytes a parameter:
  // text_tokens bounds a prompt's kept tokens (0: no limit was set; the family bounds them from
  // the prompts), `scheduler` is the run's (the schedules the jobs step through).
  virtual DeviceMemoryPlan device_memory(size_t weight_dtype_size, const std::vector<ImageJob>& jobs,
                                         int64_t text_tokens, const SchedulerConfig& scheduler) const = 0;
  // What a run of `jobs` holds in host memory on the CPU backend, and its costliest image's work.
  virtual HostRunPlan host_run(const std::vector<ImageJob>& jobs, int64_t text_tokens) const = 0;

  // The pipeline on `backend`; its parts load on first use. `reader` decides where tensors come
  // from (default: the file; MPI: one reader per node).
  virtual std::unique_ptr<ImageGenerator> make_generator(Backend& backend, const Log& log,
                                                         int64_t max_sequence_length,
                                                         std::shared_ptr<const WeightReader> reader = nullptr) const = 0;
};

}  // namespace ditbatch
