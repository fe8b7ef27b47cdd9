#include "pipeline/output_check.h"

#include <unistd.h>

#include "core/error.h"
#include "core/sha256.h"

namespace ditbatch {

namespace {

struct ListedKeys {
  const char *file, *sha256, *stat;
};

ListedKeys keys_of(bool latents) {
  return latents ? ListedKeys{"latents_file", "latents_sha256", "latents_file_stat"}
                 : ListedKeys{"file", "sha256", "file_stat"};
}

std::string string_field(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  return it != record.end() && it->is_string() ? it->get<std::string>() : std::string();
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

nlohmann::json file_stat_record(const FileStat& st) {
  return {{"size", st.size}, {"mtime_ns", st.mtime_ns}, {"inode", st.inode}, {"device", st.device}};
}

std::optional<FileStat> recorded_file_stat(const nlohmann::json& record, const char* stat_key) {
  const auto it = record.find(stat_key);
  if (it == record.end() || !it->is_object()) return std::nullopt;
  auto integer = [&](const char* key, auto& out) {
    const auto v = it->find(key);
    if (v == it->end() || !v->is_number_integer()) return false;
    out = v->get<std::remove_reference_t<decltype(out)>>();
    return true;
  };
  FileStat st;
  if (!integer("size", st.size) || !integer("mtime_ns", st.mtime_ns) || !integer("inode", st.inode) ||
      !integer("device", st.device))
    return std::nullopt;
  return st;
}

bool listed_file_is_whole(const std::string& out_dir, const ListedFile& listed, OutputTrust trust) {
  const std::string name(listed.name);
  if (!is_plain_file_name(name)) return false;
  const std::string path = out_dir + "/" + name;
  const std::optional<FileStat> now = stat_regular_file(path);
  if (!now) return false;
  if (trust == OutputTrust::Stat && now == listed.stat) return true;
  const std::string sha256 = sha256_in_folder(path);
  return !sha256.empty() && sha256 == listed.sha256;
}

bool listed_file_is_whole(const std::string& out_dir, const nlohmann::json& record, bool latents, OutputTrust trust) {
  const ListedKeys keys = keys_of(latents);
  const std::string name = string_field(record, keys.file), sha256 = string_field(record, keys.sha256);
  return listed_file_is_whole(out_dir, ListedFile{name, sha256, recorded_file_stat(record, keys.stat)}, trust);
}

std::vector<OutputMismatch> verify_listed_outputs(const std::string& out_dir,
                                                  const std::map<int64_t, nlohmann::json>& manifest, int64_t& checked) {
  std::vector<OutputMismatch> found;
  checked = 0;
  for (const auto& [index, record] : manifest) {
    if (string_field(record, "status") != "ok") continue;
    ++checked;
    for (const bool latents : {false, true}) {
      const ListedKeys keys = keys_of(latents);
      if (latents && !record.contains(keys.file)) continue;
      const std::string name = string_field(record, keys.file);
      if (!is_plain_file_name(name)) {
        found.push_back({index, name, fmt::format("\"{}\" is not a file name in the folder", keys.file)});
        continue;
      }
      const std::string path = out_dir + "/" + name;
      if (!stat_regular_file(path)) {
        found.push_back({index, name, file_exists(path) ? "is not a regular file" : "is missing"});
        continue;
      }
      const std::string sha256 = sha256_in_folder(path);
      if (sha256.empty()) found.push_back({index, name, "cannot be read"});
      else if (sha256 != string_field(record, keys.sha256))
        found.push_back({index, name, fmt::format("its bytes (sha256 {}) differ from those the manifest lists ({})",
                                                  sha256.substr(0, 12), string_field(record, keys.sha256).substr(0, 12))});
    }
  }
  return found;
}

}  // namespace ditbatch
