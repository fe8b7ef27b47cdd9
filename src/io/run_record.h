// DIR/.runs/<run>-rank<r>.json: how one process of a run spent its time (started, weights
// loaded, ended, images done / skipped / failed, host, backend; for an edit, the folder its
// relative input image paths were read under), rewritten atomically at each of those moments,
// so that a killed process leaves its last state. Kept across runs: the run report
// (pipeline/run_report.h) draws every run's timeline from them; an edit's inputs are found
// from them afterwards (pipeline/output_check.h, listed_inputs).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/log.h"

namespace ditbatch {

// `record` must hold "run_id" (a string) and "rank" (an integer): they name the file.
void write_run_record(const std::string& out_dir, const nlohmann::json& record);
// Every run record in DIR; a file that is not a JSON object with those two fields is ignored
// (another tool's, or edited by hand).
std::vector<nlohmann::json> read_run_records(const std::string& out_dir);

// One process's record through a run: written with "started" at construction, then at each
// mark. A record that cannot be written (disk full) is warned about, never fatal: the images
// and the manifest matter, the timeline does not.
class RunRecordWriter {
 public:
  RunRecordWriter(std::string out_dir, nlohmann::json record, const Log& log);
  // record[moment] = now (utc_iso), with the fields given, and the file rewritten.
  void mark(const std::string& moment, const nlohmann::json& fields = nlohmann::json::object());

 private:
  std::string out_dir_;
  nlohmann::json record_;
  const Log& log_;
  bool warned_ = false;
};

}  // namespace ditbatch
