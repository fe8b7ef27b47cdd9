// What an image leaves in the output folder, written so that a failure leaves no half of it: its
// PNG (RGB or RGBA, the record's settings in its text), its latents file (--output-type latent)
// and, in a WebDataset folder, its staged sample record. Each file goes in atomically (temporary
// name, fsync, rename); an image whose later file cannot be written loses the ones before it, so
// a rerun makes it whole. The runner decides what to make; this only writes.
#pragma once

#include <optional>
#include <set>
#include <string>

#include "io/image_record.h"
#include "pipeline/image_generator.h"
#include "pipeline/job.h"

namespace ditbatch {

class ImageWriter {
 public:
  // write_latents: --output-type latent; tars: --output-format webdataset (a sample record per image).
  ImageWriter(std::string out_dir, bool write_latents, bool tars)
      : out_dir_(std::move(out_dir)), write_latents_(write_latents), tars_(tars) {}

  // Why an image's files could not be written, and whether the folder takes no more (a full
  // disk, a quota, a folder gone: every image would fail so) or only this image's names are
  // taken by something that is not a file (a folder or FIFO planted at its PNG's name).
  struct Failure {
    std::string error;
    bool folder_takes_no_more = true;
  };
  // The PNG and the latents file of a made image, their paths, digests and stats in `record`.
  // On failure nothing of the image is left, and the failure says why.
  std::optional<Failure> write_files(const ImageJob& job, const GeneratedImage& image, ImageRecord& record);
  // WebDataset: the sample's record beside its PNG, written last (it holds the image's status
  // and times); on failure the PNG goes too. Nothing to do in a PNG folder.
  std::optional<Failure> write_sample(const ImageJob& job, ImageRecord& record);

 private:
  std::string out_dir_;
  bool write_latents_, tars_;
  std::set<std::string> folders_made_;  // the sharded layout's subfolders this process has checked
};

}  // namespace ditbatch
