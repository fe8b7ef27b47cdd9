// The generate loop of one process: take the next image from a WorkSource, skip it if it is
// already complete, make it, hand it to the ImageWriter (its files, rolled back together on a
// failure), append its manifest line, pack whole WebDataset tars. MPI only changes the
// WorkSource; nothing here knows about ranks beyond a number for the records.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/log.h"
#include "pipeline/image_outputs.h"
#include "pipeline/job.h"
#include "pipeline/progress.h"
#include "pipeline/image_generator.h"
#include "pipeline/work_source.h"

namespace ditbatch {

enum class OnSignal { Finish, Abandon };

struct RunOptions {
  std::string out_dir;
  bool overwrite = false;
  bool write_latents = false;          // --output-type latent: also <stem>.latents.h5
  int64_t images_per_tar = 0;          // --output-format webdataset (0: PNGs): images staged, then packed per tar
  bool offload_text_encoder = false;
  OnSignal on_signal = OnSignal::Finish;
  std::string run_id;                  // names this run's manifest part
  int rank = 0;
  std::string host;
  std::set<int64_t> remake;            // listed as complete, but --verify-outputs found their bytes changed
  // Per job index, what the folder holds of the image (ImageOnDisk: 0 to make), the images to
  // remake cleared: the run plan's (rank 0's scan, sent to every rank). When not given,
  // run_generation scans the folder itself and clears `remake`.
  std::optional<std::vector<uint8_t>> complete;
};

struct RunSummary {
  int64_t done = 0, skipped = 0, failed = 0;
  int64_t tars_not_written = 0;  // webdataset: a tar that could not be written (its images stay staged)
  bool stopped_by_signal = false;  // stopped early: images may be left (exit kExitRequeue)
  double seconds = 0;
};

RunSummary run_generation(ImageGenerator& pipeline, const std::vector<ImageJob>& jobs, WorkSource& work,
                          const RunOptions& options, const OutputProvenance& provenance, Progress& progress,
                          const Log& log);

}  // namespace ditbatch
