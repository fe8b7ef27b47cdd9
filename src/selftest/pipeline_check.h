// The selftest's small pipelines: the whole text-to-image path (text encoder, transformer with
// true CFG, VAE, uint8 image) on a backend, compared with a reference run.
//  - make-tiny's random model (written to a temporary file, removed after), two prompts whose
//    text lengths differ (so the joint attention runs at two lengths), 3 steps, true CFG: the
//    backend against the CPU backend.
//  - diffusers' own tiny pipeline and its outputs (tests/data/golden, where the source tree is
//    at hand): the backend against diffusers.
#pragma once

#include <string>
#include <vector>

#include "core/backend.h"
#include "core/log.h"
#include "io/h5.h"
#include "io/weight_store.h"
#include "pipeline/job.h"
#include "pipeline/image_generator.h"
#include "pipeline/image_model.h"

namespace ditbatch::selftest {

// One image against its reference.
struct ImageAgreement {
  double latents_nmse = 0;     // final packed latents, nmse against the reference's
  double psnr_db = 0;          // uint8 image against the reference's (99 when identical)
  int64_t max_pixel_diff = 0;  // largest |difference| of a uint8 channel value
  double equal_fraction = 0;   // of uint8 values equal to the reference's
  int64_t nonfinite = 0;       // NaN / Inf in the latents
  std::string error;           // the image failed (e.g. the pipeline's NaN guard)
};
ImageAgreement compare_images(const GeneratedImage& image, const Tensor& reference_latents,
                              const std::vector<uint8_t>& reference_rgb);

// What an image must meet: bf16 activations are held to catching broken kernels, f32 to
// nearly the CPU's own rounding; `bitwise` (the same arithmetic, e.g. the CPU at another thread
// count) to identical latents and pixels.
struct ImageBound {
  double latents_nmse = 0;
  double psnr_db = 0;
  int64_t max_pixel_diff = 255;
};
ImageBound image_bound(DType act, bool bitwise);
// Empty when `a` meets `bound`, else what it missed.
std::string image_failure(const ImageAgreement& a, const ImageBound& bound);

// A tiny model's jobs: prompts of different lengths, 3 steps (or the family's fixed count), true
// CFG 4, 64x48 and 48x64 (at a size multiple of 32: 64x32 and 32x64); for a model that takes
// input images, the first job alone, with synthetic images written into `folder`.
std::vector<ImageJob> tiny_pipeline_jobs(const ImageModel& model, const std::string& folder);
// make-tiny's pipeline of `model` (make-tiny --model, seed 5) at `path`; `tokenizer_dir` empty:
// make-tiny's default.
void write_tiny_model(const std::string& path, const std::string& tokenizer_dir,
                      const std::string& model = "qwen-image");
// Makes every job's image on `be` (the weights of `weights`, loaded once).
std::vector<GeneratedImage> run_pipeline(Backend& be, const WeightStore& weights, const std::vector<ImageJob>& jobs,
                                         const Log& log);

// Where diffusers' tiny pipeline and its outputs are (DITBATCH_SOURCE_DIR/tests/data/golden),
// or "" when the source tree is not at hand.
std::string find_goldens();
// The job of one case of goldens/pipeline.h5 (its attributes: prompt, seed, size, steps, cfg).
ImageJob golden_job(const h5::Group& g);
struct GoldenCase {
  ImageJob job;
  Tensor latents;            // diffusers' final packed latents [S, 64]
  std::vector<uint8_t> pixels;  // diffusers' uint8 image [H, W, channels]
};
// Cases of goldens/pipeline.h5 (every third: both sizes, with and without CFG).
std::vector<GoldenCase> golden_cases(const std::string& goldens, bool quick);
// diffusers' tiny pipeline folder converted to a weight file at `path`.
void convert_golden_model(const std::string& goldens, const std::string& path);

}  // namespace ditbatch::selftest
