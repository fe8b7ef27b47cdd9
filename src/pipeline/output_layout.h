// Where a run puts its images inside --out. Flat: every file in the folder ("000012-fox.png").
// Sharded: subfolders of kImagesPerFolder consecutive indices ("00001/000012345-fox.png"), as
// dataset tools lay out millions of images: one folder of a million files is what a parallel
// file system's metadata server handles worst, and `ls` of it takes minutes. WebDataset: tar
// shards of images_per_tar consecutive indices ("00012.tar" holding 000012000.png,
// 000012000.json, ...), each made whole by one process from the PNGs it staged in the folder of
// the same number ("00012/000012000.png" and its record "00012/000012000.json"). The manifest's
// "file" is the path inside --out (and "member" the name inside a tar), so a folder's layout
// is what its manifest lists.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ditbatch {

inline constexpr int64_t kImagesPerFolder = 10000;
inline constexpr int64_t kDefaultImagesPerTar = 1000;

struct OutputLayout {
  enum class Kind { Flat, Sharded, WebDataset };
  Kind kind = Kind::Flat;
  int64_t images_per_tar = kDefaultImagesPerTar;  // WebDataset only

  // --layout flat|sharded, --output-format png|webdataset, --images-per-tar N; anything else,
  // or a combination that means nothing (sharded tars), is refused naming the option.
  static OutputLayout parse(const std::string& layout, const std::string& format, int64_t images_per_tar);
  bool tars() const { return kind == Kind::WebDataset; }
  // The images one process makes together: a tar's (it is written whole), else one.
  int64_t images_per_unit() const { return tars() ? images_per_tar : 1; }
  int64_t tar_size() const { return tars() ? images_per_tar : 0; }  // 0: no tars
  // Consecutive images that share a subfolder (and, in WebDataset, a tar); 0 in the flat layout.
  int64_t images_per_folder() const;
  // The subfolder of image `index` ("00001" for 12345 sharded), "" in the flat layout.
  std::string folder_of(int64_t index) const;
  // The tar that holds image `index` ("00012.tar"), "" unless WebDataset.
  std::string tar_of(int64_t index) const;
  std::string describe() const;  // "flat", "sharded", "webdataset (1000 images per tar)"
};

// Whether a manifest's "file" may name an output: a plain file name, or one inside a subfolder
// whose name is 5 to 12 digits ("00001/x.png"). Nothing else: a manifest in a folder others may
// write to could name "../../dev/zero", "/etc/shadow" or "00001/../../x".
bool is_output_name(const std::string& name);

// out_dir/name when `name` is an output name and its subfolder (if any) is a real folder, not
// a symbolic link (nothing inside --out is followed); nullopt otherwise.
std::optional<std::string> output_path(const std::string& out_dir, const std::string& name);

// The subfolders of out_dir the sharded layout made (names of 5 to 12 digits, real folders), sorted.
std::vector<std::string> output_subfolders(const std::string& out_dir);

// Before any work: nothing at a subfolder's name in out_dir is other than a real folder (a
// symbolic link planted there would have the run write wherever it points). InputError naming it.
void check_output_folders(const std::string& out_dir);

// Makes out_dir/folder for the images written there (a folder already there is used); a file,
// a symbolic link or anything else at that name is refused, naming it.
void make_output_folder(const std::string& out_dir, const std::string& folder);

}  // namespace ditbatch
