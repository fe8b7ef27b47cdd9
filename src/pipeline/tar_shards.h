// --output-format webdataset: a tar is made whole from the images staged in its folder. Each
// image of "00012.tar" is first written like a sharded PNG, "00012/000012345.png", with its
// record beside it, "00012/000012345.json" (its manifest line, less where the file lies), and
// listed in the manifest as such. Once every image of the tar is staged, the process that
// made them writes the tar (members in index order, KEY.png then KEY.json, fixed metadata: the
// same bytes whoever packs it, whenever), renames it into place, appends one manifest line per
// image naming the tar and the member's place in it, and removes the staged files. A kill at
// any point leaves the staged files listed (the next run packs them) or the whole tar listed,
// never half a tar under its name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/log.h"
#include "io/manifest.h"
#include "pipeline/job.h"

namespace ditbatch {

// What a folder holds of an image, per job index (the values of the run's complete flags).
enum ImageOnDisk : uint8_t { kNotMade = 0, kStaged = 1, kPacked = 2 };

// The images [begin, end) of the tar that holds job `index`.
std::pair<int64_t, int64_t> tar_images(const std::vector<ImageJob>& jobs, int64_t index, int64_t images_per_tar);

// Packs the tar of the images [begin, end) when each is staged (or packed already: a tar written
// again after a kill before its lines were all appended). Nothing to do when all are packed (a
// staged file a kill left behind is removed); false, with a warning where one is due, when an
// image is missing, failed, or a staged file is not the one its record lists.
bool pack_tar(const std::string& out_dir, const std::vector<ImageJob>& jobs, int64_t begin, int64_t end,
              std::vector<uint8_t>& on_disk, ManifestPart& manifest, const Log& log);

}  // namespace ditbatch
