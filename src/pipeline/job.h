// One image to make, with every setting resolved: the unit of work of a generate run.
// The image depends only on (weights, prompt, negative prompt, seed, size, steps, cfg) and its
// global index, never on which process makes it or when.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/log.h"
#include "io/prompt_file.h"
#include "pipeline/output_layout.h"

namespace ditbatch {

// Command-line defaults, overridden per prompt by a jsonl line: the model card's settings (each
// family's, ImageModel::generation_defaults) and what the family's pipeline takes.
struct GenerationDefaults {
  int64_t width = 1024, height = 1024, steps = 50;
  double cfg = 4.0;
  std::string negative_prompt = " ";
  uint64_t seed = 0;
  int64_t size_multiple = 16;  // sides are floored to a multiple of this, as the pipeline does
  int64_t fixed_steps = 0;     // > 0: the checkpoint's own sigma grid fixes the steps (2.1 Turbo)
  // An edit model: a width or height of 0 is the input images' to decide (their aspect at the
  // pipeline's area, ImageModel::settle_input_images); resolve_jobs leaves such sides 0.
  bool size_from_input_images = false;
  std::string model;           // the family, for messages ("Qwen-Image-2.1")
};

inline const std::string kNoNegativePrompt;

// An input image of an edit: the path as the prompt line gives it, the file it names, and what
// the check before the run found there (pipeline/input_images.h): its sha256, the settings an
// image is remade by when the file changes, and its size once upright.
struct InputImage {
  std::string path, file;
  std::string sha256;
  int64_t width = 0, height = 0;
  bool operator==(const InputImage&) const = default;
};

struct ImageJob {
  int64_t index = 0;  // global prompt index (0-based), decides the file name and default seed
  std::string prompt, negative_prompt;
  uint64_t seed = 0;
  int64_t width = 0, height = 0, steps = 0;
  float cfg = 1.0f;
  bool true_cfg = false;  // cfg > 1 and a negative prompt ("" too; not a jsonl null), as diffusers decides
  std::string file_stem;  // "000012-a-red-fox" or the entry's name
  std::string folder;     // the subfolder of --out that holds its files ("00001"), "" in the flat layout
  std::string tar;        // WebDataset: the tar its files go into once its folder is whole ("00012.tar")
  std::string origin;     // where the prompt came from, for messages
  std::vector<InputImage> images;  // an edit's input images, in the line's order

  // What the image is made with, and so recorded with: without true CFG no negative prompt
  // reaches the denoiser, and the cfg is 1.
  const std::string& negative_prompt_used() const { return true_cfg ? negative_prompt : kNoNegativePrompt; }
  float cfg_used() const { return true_cfg ? cfg : 1.0f; }

  // Its file of that suffix, as a path inside --out and in the manifest: "00001/000012345-fox.png".
  std::string file(const char* suffix = ".png") const {
    return folder.empty() ? file_stem + suffix : folder + "/" + file_stem + suffix;
  }

  int64_t latent_h() const { return 2 * (height / 16); }  // 2 * floor(H/16): the VAE's 8x grid
  int64_t latent_w() const { return 2 * (width / 16); }
  int64_t grid_h() const { return height / 16; }  // the packed token grid
  int64_t grid_w() const { return width / 16; }
};

// Resolves and validates every entry before any work: sizes (multiples of defaults.size_multiple
// after flooring, with a warning as diffusers gives; below it, or > 8192 px, is an error; 0 where
// defaults.size_from_input_images and neither the entry nor the defaults give the side), steps
// (>= 2; defaults.fixed_steps where a checkpoint fixes them),
// cfg (>= 1), unique file names. Seeds: the entry's own, else defaults.seed + index. File
// names: "<index>-<slug>" (six digits flat, nine sharded) or the entry's name, in the
// layout's folder of the index; in WebDataset the index alone (nine digits), the sample's key.
std::vector<ImageJob> resolve_jobs(const std::vector<PromptEntry>& entries, const GenerationDefaults& defaults,
                                   const Log& log, const OutputLayout& layout = {});

// The job list as JSON, to hand the validated list from rank 0 to every rank.
std::string jobs_to_json(const std::vector<ImageJob>& jobs);
std::vector<ImageJob> jobs_from_json(const std::string& json);

// "A red fox, jumping!" -> "a-red-fox-jumping" (ASCII letters and digits, at most 48 chars).
std::string slugify(const std::string& text);

}  // namespace ditbatch
