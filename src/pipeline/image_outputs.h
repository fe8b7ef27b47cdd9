// What an image leaves behind, besides its pixels: the PNG's path and text, the record of its
// manifest line, its latents file (--output-type latent) and a staged WebDataset sample's record.
#pragma once

#include <cstdint>
#include <string>

#include "core/fs.h"
#include "core/tensor.h"
#include "io/image_record.h"
#include "io/png_io.h"
#include "io/weight_store.h"
#include "pipeline/denoiser_setup.h"
#include "pipeline/image_generator.h"
#include "pipeline/job.h"

namespace ditbatch {

// What every PNG and manifest line says about the model and the build.
struct OutputProvenance {
  std::string model_name, model_checksum;
  int64_t max_sequence_length = 0;
  DenoiserSetup denoiser;  // LoRAs and scheduler
  static OutputProvenance from(const WeightStore& weights, const ImageGenerator& pipeline);
};

// The PNG's path for a job.
std::string png_path(const std::string& out_dir, const ImageJob& job);

// The record of the image `job` asks for, as far as the job says: its settings and its file.
ImageRecord image_record_of(const ImageJob& job);
// An edit's input images as its record lists them (path as given, sha256); [] for none.
nlohmann::json input_images_json(const ImageJob& job);
// The A1111 "parameters" part naming them: ', Input images: "a.png: 0123456789, ..."' ("" for none).
std::string a1111_input_images(const nlohmann::json& input_images);

// The PNG text chunks of an image, from its record (A1111 "parameters" first, then one chunk per
// setting): the settings, LoRAs, scheduler, model and prompt token limit (where the family has
// one) it was made with.
PngText png_metadata(const ImageRecord& record);


// "ditbatch 0.1.0 (<commit>)", as the PNG text and the run's record name the build.
std::string build_version();
// --output-type latent: the image's final latents ([S, 64], diffusers' [1, S, 64] in the file)
// with its seed and size, written atomically (a full disk leaves nothing behind).
void write_latents_file(const std::string& path, const ImageJob& job, const Tensor& latents);
// The stat a rerun compares, taken right after the rename (which leaves size and mtime alone).
FileStat written_file_stat(const std::string& path);
// --output-format webdataset: the record of a staged image, beside its PNG ("00012/000012345.json"),
// which becomes the sample's .json in its tar; records where it lies and its digest in `record`.
void write_sample_record(const std::string& out_dir, const ImageJob& job, ImageRecord& record);

}  // namespace ditbatch
