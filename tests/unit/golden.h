// Reading the goldens of tests/data/golden: the tiny golden pipeline (written by diffusers'
// save_pretrained) converted once per test process with ditbatch's own converter, and the
// layout conversions between diffusers' tensors and ditbatch's.
#pragma once

#include <memory>
#include <string>

#include "io/convert.h"
#include "io/h5.h"
#include "pipeline/job.h"
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

// Row b of a [B, ...] tensor as its own [...] fp32 tensor.
inline Tensor batch_row(const Tensor& t, int64_t b) {
  Shape inner(t.shape().begin() + 1, t.shape().end());
  return t.slice0(b, b + 1).view(inner).to_f32();
}

// A [1, ...] tensor as [...].
inline Tensor squeeze0(const Tensor& t) { return t.view(Shape(t.shape().begin() + 1, t.shape().end())); }

// diffusers' [1, C, 1, H, W] (NCTHW) -> ditbatch's [H, W, C] (NHWC).
inline Tensor nchw_to_nhwc(const Tensor& t) {
  const int64_t C = t.dim(1), H = t.dim(3), W = t.dim(4);
  Tensor src = t.to_f32(), out = Tensor::host({H, W, C});
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < H * W; ++i) out.data<float>()[i * C + c] = src.data<float>()[c * H * W + i];
  return out;
}

// The image job of a pipeline.h5 case (its attributes: prompt, seed, size, steps, CFG).
inline ImageJob golden_pipeline_job(const h5::Group& g) {
  ImageJob job;
  job.prompt = g.attr_string("prompt");
  job.negative_prompt = g.attr_string("negative_prompt");
  job.seed = static_cast<uint64_t>(g.attr_int("seed"));
  job.width = g.attr_int("width");
  job.height = g.attr_int("height");
  job.steps = g.attr_int("steps");
  job.cfg = static_cast<float>(g.attr_double("true_cfg_scale"));
  job.true_cfg = g.attr_int("true_cfg") != 0;
  return job;
}

}  // namespace ditbatch::test
