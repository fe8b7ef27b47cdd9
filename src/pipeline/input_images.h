// The input images of a run's prompt lines, checked before any weight is read: the count each
// line gives against what the model takes, then every file read (a regular file, not too
// large), hashed and decoded as the run will decode it (io/image_read.h). A bad image stops
// the run before it starts, with one line naming the prompt line, the file and the reason.
#pragma once

#include <string>
#include <vector>

#include "io/rgb_image.h"
#include "pipeline/image_model.h"
#include "pipeline/job.h"

namespace ditbatch {

// Refuses a line whose image count the model does not take (an image for a text-to-image
// model, none or too many for an edit model). Reads no file.
void check_input_image_counts(const std::vector<ImageJob>& jobs, const ImageModel& model);

// Reads, hashes and decodes every input image (on up to `threads` threads), filling each one's
// sha256 and upright size; the first bad image in prompt order is the error.
void inspect_input_images(std::vector<ImageJob>& jobs, int threads);

// The image as the run uses it: read, checked to be the file inspected (same sha256: a file
// replaced since is an error, not another image made silently) and decoded.
RgbImage read_input_image(const InputImage& image, const std::string& origin);

// The folder, absolute, that the jobs' relative input image paths were read under (the prompt
// file's, or the current one for --image); "" when no job has a relative one. The manifest
// records each path as the prompt line gives it, and the run record this folder, so that
// `verify` and the report find the files later, from any current folder.
std::string relative_inputs_folder(const std::vector<ImageJob>& jobs);
// The file a recorded input path names: itself when absolute, else under `folder`; "" for a
// relative path when no folder is known.
std::string recorded_input_file(const std::string& path, const std::string& folder);

// For runs that make their own jobs (selftest, bench): as many input images as the model takes
// at least (none for text to image), each a small deterministic PNG written into `folder`, put in
// the job as generate would (sha256, size) and settled by the model.
void add_synthetic_input_images(ImageJob& job, const ImageModel& model, const std::string& folder);

}  // namespace ditbatch
