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

#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/fs.h"

namespace ditbatch {

enum class OutputTrust { Stat, Hash };

// The files a manifest line lists for an image: the PNG ("file", "sha256", "file_stat"), the
// latents of --output-type latent ("latents_file", ...) and, in a WebDataset folder, the
// record beside a staged PNG ("json_file", ...). Once packed, the PNG and the record are
// members of a tar: "file" and "file_stat" are the tar's, and "member", "member_offset",
// "member_size" (and "json_member", ...) say where they are in it.
enum class ListedFile { Image, Latents, Record };

// Whether the line lists its image as a member of a tar.
bool is_tar_member(const nlohmann::json& record);

// The stat a manifest line records under `stat_key` (nullopt unless all four are integers).
std::optional<FileStat> recorded_file_stat(const nlohmann::json& record, const char* stat_key);

// The file of that kind a line lists is in the folder as written (a tar member: the tar's stat
// is the one listed, else the member's bytes at its listed place have its sha256).
// Only a regular file that is not a symbolic link, named by a plain name inside the folder or
// inside one of its five-digit subfolders (is_output_name), can be one: a manifest in a folder
// others may write to could name "../../dev/zero" or a link.
// With `hashed`, it is set when the file was whole by its sha256 alone (its stat had changed: a
// copied or restored folder), so that the caller can record the stat it has now.
bool listed_file_is_whole(const std::string& out_dir, const nlohmann::json& record, ListedFile which, OutputTrust trust,
                          bool* hashed = nullptr);
// The same of a file (not a tar member) a line lists, read by other means (ManifestFieldParser):
// its name and sha256 ("" when not strings) and its stat (nullopt unless recorded whole).
struct FileListing {
  std::string_view name, sha256;
  std::optional<FileStat> stat;
};
bool listed_file_is_whole(const std::string& out_dir, const FileListing& listed, OutputTrust trust,
                          bool* hashed = nullptr);
// The line with the stat each file it lists has now (a tar member's: its tar's), for a line
// whose files were found whole by their sha256 after their stat changed.
nlohmann::json with_current_stats(const std::string& out_dir, nlohmann::json record);
// Whether the members a line lists in a tar are whole by the tar's stat alone: the tar (a
// ".tar" file of the folder) has the stat listed and each member a plain name and a place.
// False says only that the stat cannot tell: the members must then be read (listed_file_is_whole
// of the line).
struct MemberListing {
  std::string_view name;
  int64_t offset = -1, size = -1;
};
bool listed_members_are_whole_by_stat(const std::string& out_dir, std::string_view tar,
                                      const std::optional<FileStat>& tar_stat,
                                      std::initializer_list<MemberListing> members);

struct OutputMismatch {
  int64_t index = 0;
  std::string file, why;  // "000012-fox.png", "its bytes differ from the sha256 the manifest lists"
};

// Every file that lines listed "ok" name, hashed: those missing or whose bytes differ from the
// sha256 listed. `checked` counts the lines looked at.
std::vector<OutputMismatch> verify_listed_outputs(const std::string& out_dir,
                                                  const std::map<int64_t, nlohmann::json>& manifest, int64_t& checked);

// The folder each run read its relative input image paths under, by run id, as its run
// records say (pipeline/input_images.h, relative_inputs_folder).
std::map<std::string, std::string> inputs_folders_of_runs(const std::string& out_dir);

// An edit's input image as a manifest line records it ("input_images": path as given, sha256),
// and the file that path names: "" for a relative path whose run left no record of its folder.
struct ListedInput {
  std::string path, sha256, file;
};
std::vector<ListedInput> listed_inputs(const nlohmann::json& record, const std::map<std::string, std::string>& folders);

struct InputMismatch {
  int64_t index = 0;
  std::string path, file;
  bool changed = false;  // the file is there with other bytes; else it is missing or cannot be read
  std::string why;
};

// Every input image of lines listed "ok", hashed (a file many images share, once): those that
// are gone, cannot be read or found, or whose bytes differ from the sha256 recorded. `checked`
// counts the inputs looked at. An input is no output of the run: what it says is what a rerun
// would see (it makes an image whose input changed again, and stops at one that is missing).
std::vector<InputMismatch> verify_listed_inputs(const std::string& out_dir,
                                                const std::map<int64_t, nlohmann::json>& manifest, int64_t& checked);

}  // namespace ditbatch
