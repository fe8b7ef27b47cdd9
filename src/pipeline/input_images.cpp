#include "pipeline/input_images.h"

#include <omp.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "core/fs.h"
#include "core/sha256.h"
#include "io/image_read.h"
#include "io/png_io.h"

namespace ditbatch {

namespace {

std::string counted(int n) { return n == 1 ? "1 image" : std::to_string(n) + " images"; }

// The file's bytes and its decoded image; every error starts with the prompt line.
RgbImage decode_file(const InputImage& image, const std::string& origin, std::string* sha256) {
  try {
    const std::string bytes = read_file(image.file, kMaxInputImageBytes);
    *sha256 = sha256_hex(bytes);
    return decode_input_image(bytes, image.file);
  } catch (const InputError& e) {
    fail_input("{}: \"image\" {}", origin, e.what());
  }
}

}  // namespace

void check_input_image_counts(const std::vector<ImageJob>& jobs, const ImageModel& model) {
  const int most = model.max_input_images(), least = model.min_input_images();
  for (const ImageJob& job : jobs) {
    const int n = static_cast<int>(job.images.size());
    if (n > 0 && most == 0)
      fail_input("{}: \"image\" is given, but {} ({}) makes images from text alone and takes no input image; "
                 "an edit model's weights take them",
                 job.origin, model.family(), model.pipeline_class());
    if (n > most)
      fail_input("{}: {} given, but {} ({}) takes at most {}", job.origin, counted(n), model.family(),
                 model.pipeline_class(), counted(most));
    if (n < least)
      fail_input("{}: {} given, but {} ({}) edits images: give at least {} (\"image\" in a prompt line, --image "
                 "with --prompt)",
                 job.origin, counted(n), model.family(), model.pipeline_class(), counted(least));
  }
}

void inspect_input_images(std::vector<ImageJob>& jobs, int threads) {
  struct Slot {
    size_t job, image;
  };
  std::vector<Slot> slots;
  for (size_t j = 0; j < jobs.size(); ++j)
    for (size_t k = 0; k < jobs[j].images.size(); ++k) slots.push_back({j, k});
  std::vector<std::string> errors(slots.size());
  const int64_t n = static_cast<int64_t>(slots.size());
#pragma omp parallel for schedule(dynamic) num_threads(threads > 0 ? threads : 1)
  for (int64_t i = 0; i < n; ++i) {
    ImageJob& job = jobs[slots[i].job];
    InputImage& image = job.images[slots[i].image];
    try {
      const RgbImage decoded = decode_file(image, job.origin, &image.sha256);
      image.width = decoded.width;
      image.height = decoded.height;
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
  }
  for (const std::string& error : errors)
    if (!error.empty()) throw InputError(error);  // the first in prompt order, whatever thread found it
}

RgbImage read_input_image(const InputImage& image, const std::string& origin) {
  std::string sha256;
  RgbImage decoded = decode_file(image, origin, &sha256);
  if (!image.sha256.empty() && sha256 != image.sha256)
    fail_input("{}: \"image\" {} changed during the run (sha256 {} when checked, now {}); rerun to make its edit "
               "from the file as it is now",
               origin, image.file, image.sha256.substr(0, 12), sha256.substr(0, 12));
  return decoded;
}

std::string relative_inputs_folder(const std::vector<ImageJob>& jobs) {
  for (const ImageJob& job : jobs)
    for (const InputImage& image : job.images) {
      if (image.path.starts_with('/') || !image.file.ends_with(image.path)) continue;
      // The file is the path under the folder the run resolved it against (io/prompt_file.cpp).
      const std::string folder = image.file.substr(0, image.file.size() - image.path.size());
      const auto absolute = std::filesystem::absolute(folder.empty() ? "." : folder).lexically_normal();
      return (absolute.filename().empty() ? absolute.parent_path() : absolute).string();  // no trailing '/'
    }
  return "";
}

std::string recorded_input_file(const std::string& path, const std::string& folder) {
  if (path.starts_with('/')) return path;
  if (folder.empty() || path.empty()) return "";
  return (std::filesystem::path(folder) / path).lexically_normal().string();
}

namespace {

// A 40x30 RGB picture (the size of a small user image; the pipeline resizes every input anyway),
// its colours a function of `k`, so that two inputs differ.
InputImage write_synthetic_input_image(const std::string& path, int k) {
  constexpr int64_t kWidth = 40, kHeight = 30;
  std::vector<uint8_t> rgb(static_cast<size_t>(kWidth * kHeight * 3));
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * 7 + static_cast<size_t>(k) * 91) % 251);
  const std::string bytes = write_png_atomic(path, rgb.data(), kWidth, kHeight, 3, {});
  return {path, path, sha256_hex(bytes), kWidth, kHeight};
}

}  // namespace

void add_synthetic_input_images(ImageJob& job, const ImageModel& model, const std::string& folder) {
  for (int k = 0; k < model.min_input_images(); ++k)
    job.images.push_back(write_synthetic_input_image(folder + "/synthetic-input-" + std::to_string(k) + ".png", k));
  model.settle_input_images(job);
}

}  // namespace ditbatch
