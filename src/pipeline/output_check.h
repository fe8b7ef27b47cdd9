// Whether the files a manifest line lists (the PNG under "file", the latents under
// "latents_file") are still the bytes that were written. The line holds their sha256 and their
// stat (size, mtime in ns, inode, device) as taken right after the rename: a rerun trusts a file
// whose stat still matches without reading a byte of it (a million finished images must not be
// read and hashed at every requeue), and hashes one whose stat differs (a folder copied to
// another file system keeps its images; an edited file is never counted whole). A line of an
// older ditbatch, without a stat, is hashed. Verifying hashes every file whatever its stat:
// only that catches an edit that kept the size and restored the mtime.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/fs.h"

namespace ditbatch {

enum class OutputTrust { Stat, Hash };

// The manifest's record of a file's stat, and back (nullopt unless all four are integers).
nlohmann::json file_stat_record(const FileStat& st);
std::optional<FileStat> recorded_file_stat(const nlohmann::json& record, const char* stat_key);

// The PNG (or, with latents true, the latents file) a line lists is in the folder as written.
// Only a plain name inside the folder, of a regular file that is not a symbolic link, can be
// one: a manifest in a folder others may write to could name "../../dev/zero" or a link.
bool listed_file_is_whole(const std::string& out_dir, const nlohmann::json& record, bool latents, OutputTrust trust);
// The same of what a line lists of one file, read by other means (ManifestFieldParser): its
// name and sha256 ("" when not strings) and its stat (nullopt unless recorded whole).
struct ListedFile {
  std::string_view name, sha256;
  std::optional<FileStat> stat;
};
bool listed_file_is_whole(const std::string& out_dir, const ListedFile& listed, OutputTrust trust);

struct OutputMismatch {
  int64_t index = 0;
  std::string file, why;  // "000012-fox.png", "its bytes differ from the sha256 the manifest lists"
};

// Every file that lines listed "ok" name, hashed: those missing or whose bytes differ from the
// sha256 listed. `checked` counts the lines looked at.
std::vector<OutputMismatch> verify_listed_outputs(const std::string& out_dir,
                                                  const std::map<int64_t, nlohmann::json>& manifest, int64_t& checked);

}  // namespace ditbatch
