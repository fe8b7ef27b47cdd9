// A tiny random pipeline made once per test process with `ditbatch make-tiny` (the model the
// demo, generate, MPI and Slurm tests run).
#pragma once

#include <memory>
#include <string>

#include "test_util.h"

namespace ditbatch::test {

inline const std::string& tiny_model() {
  static std::unique_ptr<TempDir> dir;
  static std::string path;
  if (path.empty()) {
    dir = std::make_unique<TempDir>();
    path = *dir / "tiny.h5";
    auto r = run(exe() + " make-tiny --seed 3 --out " + path);
    if (r.status != 0) ADD_FAILURE() << "make-tiny failed: " << r.output;
  }
  return path;
}

}  // namespace ditbatch::test
