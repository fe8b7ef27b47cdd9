// The tiny golden pipeline (tests/data/golden/tiny-pipeline, written by diffusers'
// save_pretrained) converted once per test process with ditbatch's own converter.
#pragma once

#include <memory>
#include <string>

#include "io/convert.h"
#include "test_util.h"

namespace ditbatch::test {

inline const std::string& golden_weights() {
  static std::unique_ptr<TempDir> dir;
  static std::string path;
  if (path.empty()) {
    dir = std::make_unique<TempDir>();
    path = *dir / "tiny-golden.h5";
    ConvertOptions opt;
    opt.from = golden("tiny-pipeline");
    opt.to = path;
    convert_diffusers(opt, Log::quiet());
  }
  return path;
}

}  // namespace ditbatch::test
