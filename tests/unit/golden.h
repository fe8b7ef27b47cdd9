// Reading the goldens of tests/data/golden: the tiny golden pipeline (written by diffusers'
// save_pretrained) converted once per test process with ditbatch's own converter, and the
// layout conversions between diffusers' tensors and ditbatch's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "convert/convert.h"
#include "io/h5.h"
#include "model/weights.h"
#include "pipeline/job.h"
#include "selftest/pipeline_check.h"
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

// The converted golden pipeline, opened once per test process.
inline const WeightStore& golden_store() {
  static const WeightStore store = WeightStore::open(golden_weights());
  return store;
}

// The tiny pipeline as an Edit folder: model_index.json naming `pipeline_class` (QwenImageEditPipeline
// or QwenImageEditPlusPipeline) and the processor's preprocessor_config.json (Qwen2.5-VL's published
// settings). Its text encoder holds a vision tower (visual.*) already.
inline void write_edit_pipeline(const std::string& root, const std::string& pipeline_class) {
  std::filesystem::remove_all(root);
  std::filesystem::copy(golden("tiny-pipeline"), root, std::filesystem::copy_options::recursive);
  nlohmann::json index = nlohmann::json::parse(read_text(root + "/model_index.json"));
  index["_class_name"] = pipeline_class;
  index["processor"] = {"transformers", "Qwen2VLProcessor"};
  write_text(root + "/model_index.json", index.dump(2));
  write_text(root + "/processor/preprocessor_config.json",
             R"({"image_processor_type": "Qwen2VLImageProcessor", "min_pixels": 3136, "max_pixels": 12845056,
                 "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2, "resample": 3,
                 "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]})");
}

// write_edit_pipeline's QwenImageEditPipeline folder converted once per test process.
inline const std::string& golden_edit_weights() {
  static std::unique_ptr<TempDir> dir;
  static std::string path;
  if (path.empty()) {
    dir = std::make_unique<TempDir>();
    write_edit_pipeline(*dir / "edit", "QwenImageEditPipeline");
    path = *dir / "tiny-golden-edit.h5";
    ConvertOptions opt;
    opt.from = *dir / "edit";
    opt.to = path;
    convert_diffusers(opt, Log::quiet());
  }
  return path;
}

// A golden file's weights/ datasets (a model's tensors under their diffusers / transformers
// names, `prefix` in front of the names the model binds), each checked against the shape the
// model binds it with; `bound` counts them.
class GoldenWeights final : public WeightBinder {
 public:
  GoldenWeights(h5::Group group, std::string prefix = "") : group_(std::move(group)), prefix_(std::move(prefix)) {}
  Tensor bind(const std::string& name, const Shape& shape, WeightInit, const std::string& why) override {
    Tensor t = group_.read_tensor(prefix_ + name);
    EXPECT_EQ(t.shape(), shape) << name << " (" << why << ")";
    ++bound;
    return t;
  }
  size_t bound = 0;

 private:
  h5::Group group_;
  std::string prefix_;
};

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
inline ImageJob golden_pipeline_job(const h5::Group& g) { return selftest::golden_job(g); }

// How an 8-bit image agrees with diffusers' (image_uint8 of a pipeline.h5 case).
struct RgbAgreement {
  int64_t max_diff = 0;
  double equal_fraction = 0, psnr_db = 0;  // psnr 99 when identical
};
inline RgbAgreement rgb_agreement(const uint8_t* rgb, int64_t n, const Tensor& expected) {
  RgbAgreement a;
  int64_t equal = 0;
  double mse = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = std::abs(int64_t{rgb[i]} - int64_t{expected.data<uint8_t>()[i]});
    equal += d == 0;
    a.max_diff = std::max(a.max_diff, d);
    mse += static_cast<double>(d * d);
  }
  mse /= static_cast<double>(std::max<int64_t>(n, 1));
  a.equal_fraction = static_cast<double>(equal) / static_cast<double>(std::max<int64_t>(n, 1));
  a.psnr_db = mse > 0 ? 10.0 * std::log10(255.0 * 255.0 / mse) : 99.0;
  return a;
}

}  // namespace ditbatch::test
