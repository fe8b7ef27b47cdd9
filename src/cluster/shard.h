// Which images a rank makes. Job arrays first take a contiguous slice of the prompt list
// (--array-index I --array-count N, defaults from SLURM_ARRAY_TASK_ID/_MIN/_COUNT); the ranks
// of a job then share that slice:
//   contiguous  accelerate's split_between_processes: blocks, the first ranks take one more
//   strided     index mod world size
//   dynamic     the next index from a counter at rank 0 (MPI_Fetch_and_op): balanced when
//               images differ in size or steps
//   auto        dynamic when sizes, steps, CFG or input images' sizes differ, else contiguous (contiguous also with
//               --offload-text-encoder, which needs to know its prompts up front)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cluster/world.h"
#include "pipeline/job.h"
#include "pipeline/work_source.h"

namespace ditbatch {

enum class ShardMode { Auto, Contiguous, Strided, Dynamic };
ShardMode parse_shard_mode(const std::string& name);
std::string shard_mode_name(ShardMode mode);

// Part `part` of `parts` over [0, n): accelerate's split (first n % parts parts get one more).
std::pair<int64_t, int64_t> contiguous_range(int64_t n, int64_t parts, int64_t part);

struct ArraySlice {
  int64_t index = 0, count = 1;
  // From the options when given (>= 0), else from (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN) /
  // SLURM_ARRAY_TASK_STEP and SLURM_ARRAY_TASK_COUNT, else the whole list.
  static ArraySlice resolve(int64_t index_option, int64_t count_option);
};

ShardMode resolve_shard_mode(ShardMode requested, const std::vector<ImageJob>& jobs, bool offload_text_encoder);

// The images [begin, end) of an array slice: a contiguous range of units of images_per_unit
// consecutive images (1: single images; a WebDataset tar's images are never split between tasks).
std::pair<int64_t, int64_t> slice_images(int64_t n_jobs, const ArraySlice& slice, int64_t images_per_unit = 1);

// This rank's work over the array slice of `jobs` (collective for dynamic). With
// images_per_unit > 1 the ranks share whole units, and hand out a unit's images in order.
std::unique_ptr<WorkSource> make_work(ShardMode mode, const ArraySlice& slice, int64_t n_jobs, const World& world,
                                      int64_t images_per_unit = 1);

}  // namespace ditbatch
