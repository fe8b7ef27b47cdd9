#include "pipeline/image_writer.h"

#include <cstdio>

#include "core/error.h"
#include "core/sha256.h"
#include "pipeline/image_outputs.h"
#include "pipeline/output_layout.h"

namespace ditbatch {

namespace {

// InputError is what refuses to write over something that is not a regular file at an output's
// own name (or a file at its subfolder's): the other images' names are not taken by it.
ImageWriter::Failure failure_of(const std::exception& e) {
  return {fmt::format("cannot write the output: {}", e.what()), dynamic_cast<const InputError*>(&e) == nullptr};
}

}  // namespace

std::optional<ImageWriter::Failure> ImageWriter::write_files(const ImageJob& job, const GeneratedImage& image,
                                                    ImageRecord& record) {
  const std::string png = png_path(out_dir_, job);
  bool png_written = false;
  try {
    if (!job.folder.empty() && !folders_made_.count(job.folder)) {  // (a refused one is tried again by its next image)
      make_output_folder(out_dir_, job.folder);
      folders_made_.insert(job.folder);
    }
    const std::string bytes =
        write_png_atomic(png, image.pixels.data(), job.width, job.height, image.channels, png_metadata(record));
    png_written = true;
    record.file_stat = written_file_stat(png);
    if (write_latents_) {
      const std::string latents = job.file(".latents.h5");
      write_latents_file(out_dir_ + "/" + latents, job, image.latents);
      record.latents_file = latents;
      record.latents_sha256 = sha256_file(out_dir_ + "/" + latents);
      record.latents_file_stat = written_file_stat(out_dir_ + "/" + latents);
    }
    record.sha256 = sha256_hex(bytes);
    return std::nullopt;
  } catch (const std::exception& e) {
    // With --output-type latent an image is its PNG and its latents file: the PNG goes too, so
    // that a failed image leaves no file behind (a rerun makes both).
    if (png_written) std::remove(png.c_str());
    return failure_of(e);
  }
}

std::optional<ImageWriter::Failure> ImageWriter::write_sample(const ImageJob& job, ImageRecord& record) {
  if (!tars_) return std::nullopt;
  try {
    write_sample_record(out_dir_, job, record);
    return std::nullopt;
  } catch (const std::exception& e) {
    std::remove(png_path(out_dir_, job).c_str());  // an image is its PNG and its record
    return failure_of(e);
  }
}

}  // namespace ditbatch
