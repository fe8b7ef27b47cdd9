// A generate run planned once, before any weight is read, and shared by every rank: rank 0
// checks the input (the prompts, the weight file's family and its settings, the LoRAs, the
// output folder and what it already holds), decides the job list, the array slice, which images
// are complete (--verify-outputs spread over the ranks), and takes the slice's lock; every rank
// learns the plan. Collective under MPI; a bad input makes every rank exit 2 with rank 0 saying why.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cluster/shard.h"
#include "cluster/world.h"
#include "core/log.h"
#include "core/timer.h"
#include "io/image_range_lock.h"
#include "io/weight_store.h"
#include "model/lora.h"
#include "model/scheduler.h"
#include "model/text_positions.h"
#include "pipeline/job.h"
#include "pipeline/output_layout.h"
#include "pipeline/runner.h"

namespace ditbatch {

// The image settings the command line gave; the others are the weight file's family's.
struct GivenSettings {
  std::optional<int64_t> width, height, steps, max_sequence_length;
  std::optional<double> cfg;
  std::optional<std::string> negative_prompt;
};

// What a generate run asks for, as its command line gave it.
struct RunRequest {
  GivenSettings given;
  GenerationDefaults defaults;  // the family's, with the given settings in place (by plan_run)
  std::vector<std::string> prompts;
  std::vector<std::string> images;  // --image: every --prompt's input images (an edit model)
  std::string prompts_file, weights_path;
  OutputLayout layout;
  RunOptions run;
  int64_t max_sequence_length = 0;  // the family's default unless given; 0: the family takes no limit
  bool verify_outputs = false;
  int64_t array_index = -1, array_count = -1;
  std::vector<std::string> loras;  // --lora FILE[:STRENGTH], each
  std::string scheduler, scheduler_config;
  TextPositionMode text_positions = TextPositionMode::Sequential;  // --text-positions
  // Whether the run's backend is the CPU's (then its host memory and time are checked first);
  // asked on rank 0 only, while it checks the input.
  std::function<bool()> runs_on_cpu;
};

// What every rank of a run knows before any weight is read, decided by rank 0: the job list,
// the LoRA set, the array slice, which images are complete, how many are left to make, and
// rank 0's lock on the slice's images (held for the whole run).
struct RunPlan {
  std::vector<ImageJob> jobs;
  LoraSet loras;
  ArraySlice slice;
  std::vector<uint8_t> complete;  // per job index, rank 0's, from the scan made at validation
  int64_t remaining = 0;          // images of the slice still to make
  std::optional<ImageRangeLock> lock;
  std::vector<std::string> replaced;  // rank 0's, --overwrite: files of another prompt list to remove once unlisted
  std::pair<int64_t, int64_t> slice_range(const RunRequest& o) const {
    return slice_images(std::ssize(jobs), slice, o.layout.images_per_unit());
  }
};

// Collective. Rank 0 checks the input once (on a bad input every rank exits 2, rank 0 says
// why), scans the folder, removes what killed writers left and takes the lock; every rank then
// learns the plan. `request.run` gets the run's id, the images to make again and the complete
// flags; `weight_file` the weight file where this rank opened it.
void plan_run(RunRequest& request, const World& world, const Log& log, std::optional<WeightStore>& weight_file,
              RunPlan& plan);

// Nothing left to make in this slice (a rerun, the last requeue): done without reading weights.
int finish_with_nothing_to_make(RunRequest& request, RunPlan& plan, const World& world, const Stopwatch& wall,
                                const Log& log);

// The weight file's scheduler, or the one --scheduler / --scheduler-config puts in its place.
SchedulerConfig chosen_scheduler(const RunRequest& o, const WeightStore& weights);

}  // namespace ditbatch
