// The backend-independent stages of `ditbatch selftest`, each adding its rows to a Report:
// every op case in each activation mode, the small pipelines, the machine's figures.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/log.h"
#include "selftest/report.h"

namespace ditbatch::selftest {

// A fresh backend in the given activation mode (each mode gets its own: the CUDA backend's
// mode is fixed at construction).
using BackendFactory = std::function<std::unique_ptr<Backend>(DType act)>;

// Every op case (quick: one per op) on a backend of each mode, against the CPU backend (or,
// for the CPU backend, against float64 loops); then the shape contract and the NaN count.
void check_ops(Report& report, const BackendFactory& make, const std::vector<DType>& modes, bool quick);

struct PipelineCheckOptions {
  bool quick = false;
  std::string tokenizer_dir;  // make-tiny's tokenizer; empty: its default (the source tree's)
  std::string goldens;        // diffusers' tiny pipeline and outputs; empty: not checked, because
  std::string no_goldens_why = "not found (they are in the source tree's tests/data/golden; --goldens DIR)";
  std::string temp_dir;       // where the tiny model is written (and removed)
  std::vector<std::string> models;  // the families whose tiny pipeline is checked (make-tiny's names); empty: all
};
// The tiny pipeline on the backend of `act` against the CPU backend. When the backend is the
// CPU, against itself at one thread: the CPU's images must not depend on the thread count.
// Then, with goldens, the backend against diffusers' tiny pipeline.
void check_pipelines(Report& report, const BackendFactory& make, DType act, const PipelineCheckOptions& o,
                     const Log& log);

void measure(Report& report, Backend& be, bool quick);

}  // namespace ditbatch::selftest
