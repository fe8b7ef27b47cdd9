#include "pipeline/output_check.h"

#include <unistd.h>

#include "core/error.h"
#include "core/sha256.h"
#include "io/image_read.h"
#include "io/image_record.h"
#include "io/run_record.h"
#include "io/tar_archive.h"
#include "pipeline/input_images.h"
#include "pipeline/output_layout.h"

namespace ditbatch {

namespace {

// The manifest fields that list one file of an image. In a WebDataset folder the image and its
// record become members of a tar: "file" and "file_stat" are then the tar's, and the member's
// name, offset and size say where inside it.
struct ListedKeys {
  const char *file, *sha256, *stat, *member, *offset, *size;
};

ListedKeys keys_of(ListedFile which) {
  switch (which) {
    case ListedFile::Image: return {"file", "sha256", "file_stat", "member", "member_offset", "member_size"};
    case ListedFile::Latents: return {"latents_file", "latents_sha256", "latents_file_stat", nullptr, nullptr, nullptr};
    case ListedFile::Record:
      return {"json_file", "json_sha256", "json_file_stat", "json_member", "json_member_offset", "json_member_size"};
  }
  return {};
}

std::string string_field(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  return it != record.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t int_field(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  return it != record.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

// The file's sha256, or "" when it is not a regular file in the folder or cannot be read.
std::string sha256_in_folder(const std::string& path) {
  const int fd = open_regular_file(path, false, nullptr);
  if (fd < 0) return "";
  std::string sha256;
  try {
    sha256 = sha256_fd(fd);
  } catch (const InputError&) {  // unreadable: not whole
  }
  ::close(fd);
  return sha256;
}

}  // namespace

std::optional<FileStat> recorded_file_stat(const nlohmann::json& record, const char* stat_key) {
  const auto it = record.find(stat_key);
  return it == record.end() ? std::nullopt : file_stat_from_json(*it);
}

bool is_tar_member(const nlohmann::json& record) {
  const auto it = record.find("member");
  return it != record.end() && it->is_string();
}

namespace {

// Where a line lists a file: its path, and for a tar member the member's place in it.
struct Listed {
  std::string path;               // the file, or the tar that holds it
  std::string member;             // "" unless in a tar
  int64_t offset = -1, size = -1;
  const char* stat_key = nullptr;
  const char* sha256_key = nullptr;
};

// The tar a line names, as a path in the folder, when it is a ".tar" there and each member has a
// plain name and a place in it; else nullopt (the line cannot place its members).
std::optional<std::string> tar_of_members(const std::string& out_dir, const std::string& tar,
                                          std::initializer_list<MemberListing> members) {
  if (!tar.ends_with(".tar")) return std::nullopt;
  for (const MemberListing& m : members)
    if (!is_plain_file_name(std::string(m.name)) || m.offset < 0 || m.size < 0) return std::nullopt;
  return output_path(out_dir, tar);
}

// nullopt when the line names no file inside the folder (or a tar member the line cannot place).
std::optional<Listed> listed(const std::string& out_dir, const nlohmann::json& record, ListedFile which) {
  const ListedKeys keys = keys_of(which);
  Listed l;
  l.sha256_key = keys.sha256;
  if (keys.member && is_tar_member(record)) {
    l.member = string_field(record, keys.member);
    l.offset = int_field(record, keys.offset);
    l.size = int_field(record, keys.size);
    const std::optional<std::string> path =
        tar_of_members(out_dir, string_field(record, "file"), {{l.member, l.offset, l.size}});
    if (!path) return std::nullopt;
    l.path = *path;
    l.stat_key = "file_stat";
    return l;
  }
  const std::optional<std::string> path = output_path(out_dir, string_field(record, keys.file));
  if (!path) return std::nullopt;
  l.path = *path;
  l.stat_key = keys.stat;
  return l;
}

// The sha256 of what `l` lists ("" when it cannot be read, or a member is not where listed).
std::string sha256_of(const Listed& l) {
  if (l.member.empty()) return sha256_in_folder(l.path);
  const std::optional<std::string> bytes = read_tar_member(l.path, l.offset, l.member, l.size);
  return bytes ? sha256_hex(*bytes) : "";
}

// Whether bytes hashed to `sha256` are the listed ones; `hashed` set when that took a hash
// the stat alone would have spared (the stat had changed).
bool hash_is_listed(const std::string& sha256, std::string_view listed, OutputTrust trust, bool* hashed) {
  const bool whole = !sha256.empty() && sha256 == listed;
  if (whole && hashed && trust == OutputTrust::Stat) *hashed = true;
  return whole;
}

}  // namespace

bool listed_file_is_whole(const std::string& out_dir, const FileListing& listed, OutputTrust trust, bool* hashed) {
  const std::optional<std::string> path = output_path(out_dir, std::string(listed.name));
  if (!path) return false;
  const std::optional<FileStat> now = stat_regular_file(*path);
  if (!now) return false;
  if (trust == OutputTrust::Stat && now == listed.stat) return true;
  return hash_is_listed(sha256_in_folder(*path), listed.sha256, trust, hashed);
}

bool listed_members_are_whole_by_stat(const std::string& out_dir, std::string_view tar,
                                      const std::optional<FileStat>& tar_stat,
                                      std::initializer_list<MemberListing> members) {
  const std::optional<std::string> path = tar_of_members(out_dir, std::string(tar), members);
  return tar_stat && path && stat_regular_file(*path) == tar_stat;
}

bool listed_file_is_whole(const std::string& out_dir, const nlohmann::json& record, ListedFile which, OutputTrust trust,
                          bool* hashed) {
  const ListedKeys keys = keys_of(which);
  if (!keys.member || !is_tar_member(record))
    return listed_file_is_whole(out_dir,
                                FileListing{string_field(record, keys.file), string_field(record, keys.sha256),
                                            recorded_file_stat(record, keys.stat)},
                                trust, hashed);
  const std::optional<Listed> l = listed(out_dir, record, which);
  if (!l) return false;
  const std::optional<FileStat> now = stat_regular_file(l->path);
  if (!now) return false;
  if (trust == OutputTrust::Stat && now == recorded_file_stat(record, l->stat_key)) return true;
  return hash_is_listed(sha256_of(*l), string_field(record, l->sha256_key), trust, hashed);
}

nlohmann::json with_current_stats(const std::string& out_dir, nlohmann::json record) {
  for (const ListedFile which : {ListedFile::Image, ListedFile::Latents, ListedFile::Record}) {
    const ListedKeys keys = keys_of(which);
    if (!record.contains(keys.file) && !(keys.member && record.contains(keys.member))) continue;
    const std::optional<Listed> l = listed(out_dir, record, which);
    if (!l) continue;
    if (const std::optional<FileStat> now = stat_regular_file(l->path)) record[l->stat_key] = file_stat_json(*now);
  }
  return record;
}

std::vector<OutputMismatch> verify_listed_outputs(const std::string& out_dir,
                                                  const std::map<int64_t, nlohmann::json>& manifest, int64_t& checked) {
  std::vector<OutputMismatch> found;
  checked = 0;
  for (const auto& [index, record] : manifest) {
    if (string_field(record, "status") != "ok") continue;
    ++checked;
    for (const ListedFile which : {ListedFile::Image, ListedFile::Latents, ListedFile::Record}) {
      const ListedKeys keys = keys_of(which);
      const bool member = keys.member && is_tar_member(record);
      if (which != ListedFile::Image && !record.contains(member ? keys.member : keys.file)) continue;
      const std::string name = member ? fmt::format("{}:{}", string_field(record, "file"), string_field(record, keys.member))
                                      : string_field(record, keys.file);
      const std::optional<Listed> l = listed(out_dir, record, which);
      if (!l) {
        found.push_back({index, name,
                         fmt::format("\"{}\" is not a file of the folder (a name, or one in a five-digit subfolder "
                                     "that is not a symbolic link{})",
                                     keys.file, member ? ", with the member's name, offset and size" : "")});
        continue;
      }
      if (!stat_regular_file(l->path)) {
        found.push_back({index, name, file_exists(l->path) ? "is not a regular file" : "is missing"});
        continue;
      }
      const std::string sha256 = sha256_of(*l);
      const std::string listed_sha256 = string_field(record, keys.sha256);
      if (sha256.empty())
        found.push_back({index, name, member ? "is not where the manifest lists it in the tar" : "cannot be read"});
      else if (sha256 != listed_sha256)
        found.push_back({index, name, fmt::format("its bytes (sha256 {}) differ from those the manifest lists ({})",
                                                  sha256.substr(0, 12), listed_sha256.substr(0, 12))});
    }
  }
  return found;
}

std::map<std::string, std::string> inputs_folders_of_runs(const std::string& out_dir) {
  std::map<std::string, std::string> folders;
  for (const nlohmann::json& r : read_run_records(out_dir))
    if (const std::string folder = string_field(r, "inputs_folder"); !folder.empty())
      folders[r["run_id"].get<std::string>()] = folder;
  return folders;
}

std::vector<ListedInput> listed_inputs(const nlohmann::json& record, const std::map<std::string, std::string>& folders) {
  std::vector<ListedInput> inputs;
  const auto list = record.find("input_images");
  if (list == record.end() || !list->is_array()) return inputs;
  const auto folder = folders.find(string_field(record, "run_id"));
  for (const nlohmann::json& image : *list) {
    if (!image.is_object()) continue;
    const std::string path = string_field(image, "path");
    inputs.push_back({path, string_field(image, "sha256"),
                      recorded_input_file(path, folder == folders.end() ? "" : folder->second)});
  }
  return inputs;
}

std::vector<InputMismatch> verify_listed_inputs(const std::string& out_dir,
                                                const std::map<int64_t, nlohmann::json>& manifest, int64_t& checked) {
  const auto folders = inputs_folders_of_runs(out_dir);
  std::map<std::string, std::string> sha256_of_file;  // "" when the run could not read it
  auto sha256_now = [&](const std::string& file) -> const std::string& {
    auto [it, inserted] = sha256_of_file.emplace(file, "");
    if (inserted) {
      try {  // read as the run reads it: a link followed, a FIFO or a device refused
        it->second = sha256_hex(read_file(file, kMaxInputImageBytes));
      } catch (const std::exception&) {
      }
    }
    return it->second;
  };
  std::vector<InputMismatch> found;
  checked = 0;
  for (const auto& [index, record] : manifest) {
    if (string_field(record, "status") != "ok") continue;
    for (const ListedInput& input : listed_inputs(record, folders)) {
      ++checked;
      if (input.file.empty()) {
        found.push_back({index, input.path, "", false, "not found: no run record says the folder its relative path was read under"});
        continue;
      }
      const std::string& sha256 = sha256_now(input.file);
      if (sha256.empty())
        found.push_back({index, input.path, input.file, false,
                         file_exists(input.file) ? "cannot be read" : "missing"});
      else if (sha256 != input.sha256)
        found.push_back({index, input.path, input.file, true,
                         fmt::format("changed: its bytes (sha256 {}) differ from those recorded ({})", sha256.substr(0, 12),
                                     input.sha256.substr(0, 12))});
    }
  }
  return found;
}

}  // namespace ditbatch
