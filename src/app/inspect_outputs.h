// `ditbatch inspect DIR` of a generate output folder (any layout).
#pragma once

#include <string>

namespace ditbatch {

// Prints what the folder's manifest lists (images ok and failed, layout, whether each listed
// file is still there as written, models, settings, runs, unmerged parts, the report). Exit
// status 0; a folder with no manifest is refused (InputError).
int inspect_output_folder(const std::string& out_dir);

}  // namespace ditbatch
