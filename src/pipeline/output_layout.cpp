#include "pipeline/output_layout.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/fs.h"

namespace ditbatch {

namespace {

// Five digits, more past 10^9 images.
bool is_folder_name(std::string_view name) {
  return name.size() >= 5 && name.size() <= 12 &&
         std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_real_folder(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// What is at a subfolder's name when it is not a real folder.
std::string not_a_folder(const struct stat& st) {
  return S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISREG(st.st_mode) ? "a file" : describe_file_type(st.st_mode);
}

}  // namespace

OutputLayout OutputLayout::parse(const std::string& layout, const std::string& format, int64_t images_per_tar) {
  OutputLayout out;
  if (layout != "flat" && layout != "sharded") fail_input("--layout '{}' (expected flat or sharded)", layout);
  if (format != "png" && format != "webdataset")
    fail_input("--output-format '{}' (expected png or webdataset)", format);
  if (format == "webdataset") {
    if (layout == "sharded")
      fail_input("--layout sharded with --output-format webdataset: the tars are the shards (NNNNN.tar in --out, "
                 "--images-per-tar images each); give one or the other");
    if (images_per_tar < 1 || images_per_tar > kImagesPerFolder * 10)
      fail_input("--images-per-tar {} is out of range (1..{})", images_per_tar, kImagesPerFolder * 10);
    out.kind = Kind::WebDataset;
    out.images_per_tar = images_per_tar;
  } else {
    if (images_per_tar != kDefaultImagesPerTar)
      fail_input("--images-per-tar {} needs --output-format webdataset", images_per_tar);
    out.kind = layout == "sharded" ? Kind::Sharded : Kind::Flat;
  }
  return out;
}

int64_t OutputLayout::images_per_folder() const {
  return kind == Kind::Flat ? 0 : kind == Kind::Sharded ? kImagesPerFolder : images_per_tar;
}

std::string OutputLayout::folder_of(int64_t index) const {
  return kind == Kind::Flat ? std::string() : fmt::format("{:05d}", index / images_per_folder());
}

std::string OutputLayout::tar_of(int64_t index) const { return tars() ? folder_of(index) + ".tar" : std::string(); }

std::string OutputLayout::describe() const {
  return kind == Kind::Flat      ? std::string("flat")
         : kind == Kind::Sharded ? std::string("sharded")
                                 : fmt::format("webdataset ({} images per tar)", images_per_tar);
}

bool is_output_name(const std::string& name) {
  const size_t slash = name.find('/');
  if (slash == std::string::npos) return is_plain_file_name(name);
  return is_folder_name(std::string_view(name).substr(0, slash)) && is_plain_file_name(name.substr(slash + 1));
}

std::optional<std::string> output_path(const std::string& out_dir, const std::string& name) {
  if (!is_output_name(name)) return std::nullopt;
  const size_t slash = name.find('/');
  if (slash != std::string::npos && !is_real_folder(out_dir + "/" + name.substr(0, slash))) return std::nullopt;
  return out_dir + "/" + name;
}

std::vector<std::string> output_subfolders(const std::string& out_dir) {
  std::vector<std::string> found;
  DIR* dir = ::opendir(out_dir.c_str());
  if (!dir) return found;
  while (const dirent* e = ::readdir(dir))
    if (is_folder_name(e->d_name) && is_real_folder(out_dir + "/" + e->d_name)) found.emplace_back(e->d_name);
  ::closedir(dir);
  std::sort(found.begin(), found.end());
  return found;
}

void check_output_folders(const std::string& out_dir) {
  DIR* dir = ::opendir(out_dir.c_str());
  if (!dir) return;
  std::string bad;
  while (const dirent* e = ::readdir(dir))
    if (is_folder_name(e->d_name) && !is_real_folder(out_dir + "/" + e->d_name)) {
      bad = out_dir + "/" + e->d_name;
      break;
    }
  ::closedir(dir);
  if (bad.empty()) return;
  struct stat st {};
  ::lstat(bad.c_str(), &st);
  fail_input("--out {}: {} is {}, where the run keeps a folder of images (sharded, or a tar's staged ones); remove it",
             out_dir, bad, not_a_folder(st));
}

void make_output_folder(const std::string& out_dir, const std::string& folder) {
  const std::string path = out_dir + "/" + folder;
  if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST)
    fail("{}: cannot create the folder: {}", path, std::strerror(errno));
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) fail("{}: is gone right after it was made: {}", path, std::strerror(errno));
  if (!S_ISDIR(st.st_mode))
    fail_input("{}: is {}, not the folder the run keeps these images in; remove it", path, not_a_folder(st));
}

}  // namespace ditbatch
