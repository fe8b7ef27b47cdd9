// The run report of an output folder, OUT/report.html: one self-contained page (no network)
// with the job's header (model, version, shared settings, ranks and hosts, wall time, images
// per hour per GPU), a gallery of every image beside its prompt and settings (an edit's beside
// its input images, linked relatively from OUT where the run's record says they lie), the failed
// images with their reasons, and a timeline per run with a lane per rank. Built from what the
// folder holds (the manifest, the parts of runs still going, the run records), so it can be
// written at any time: by rank 0 at the end of a run, or by `ditbatch report OUT`.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/log.h"

namespace ditbatch {

// What the page shows, as the JSON its script reads (the layout is report_page.html's).
nlohmann::json collect_run_report(const std::string& out_dir);
// Writes OUT/report.html atomically from collect_run_report; returns its path. `warning` gets
// what the page says of manifest lines that are none ("" when every line is one).
std::string write_run_report(const std::string& out_dir, std::string* warning = nullptr);
// The same at the end of a generate run: logs where the report is, and only warns when it
// cannot be written (the images and the manifest are what the run is for).
void write_run_report_after_run(const std::string& out_dir, const Log& log);

}  // namespace ditbatch
