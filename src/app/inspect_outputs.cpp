// `ditbatch inspect DIR`: what a generate output folder holds, from its manifest (the last line
// per index, manifest.jsonl and the parts of runs not yet merged) and a stat of each listed file
// (no image byte is read: a million-image folder is summed up in seconds).
#include <sys/stat.h>

#include <filesystem>
#include <iostream>
#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "app/inspect_outputs.h"
#include "core/error.h"
#include "core/fs.h"
#include "io/manifest.h"
#include "pipeline/output_check.h"
#include "pipeline/output_layout.h"

namespace ditbatch {

namespace {

// Strings many lines share (a model, a size), stored once.
class Interned {
 public:
  uint32_t id(const std::string& s) {
    auto [it, added] = ids_.emplace(s, static_cast<uint32_t>(names_.size()));
    if (added) names_.push_back(s);
    return it->second;
  }
  const std::string& name(uint32_t id) const { return names_[id]; }

 private:
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
};

enum class OnDisk : uint8_t { AsListed, Changed, Missing, NotAName };

enum class Where : uint8_t { Flat, Subfolder, Staged, Tar };  // Staged: a WebDataset image before its tar

struct ImageLine {
  bool ok = false;
  Where where = Where::Flat;
  OnDisk on_disk = OnDisk::Missing;
  uint32_t model = 0, settings = 0, run = 0;
};

std::string text_of(const nlohmann::json& line, const char* key) {
  const auto it = line.find(key);
  if (it == line.end()) return "-";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// What is on disk at a listed name, by its stat alone.
OnDisk on_disk(const std::string& out_dir, const nlohmann::json& line) {
  const auto file = line.find("file");
  if (file == line.end() || !file->is_string()) return OnDisk::NotAName;
  const std::optional<std::string> path = output_path(out_dir, file->get<std::string>());
  if (!path) return OnDisk::NotAName;
  const std::optional<FileStat> now = stat_regular_file(*path);
  if (!now) return OnDisk::Missing;
  return now == recorded_file_stat(line, "file_stat") ? OnDisk::AsListed : OnDisk::Changed;
}

template <class Count>
void print_counts(const char* title, const std::map<uint32_t, Count>& counts, const Interned& names, size_t shown = 5) {
  std::vector<std::pair<Count, uint32_t>> order;
  for (const auto& [id, n] : counts) order.emplace_back(n, id);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::cout << "  " << title << ":";
  for (size_t i = 0; i < order.size() && i < shown; ++i)
    std::cout << (i ? "," : "") << " " << names.name(order[i].second) << " (" << order[i].first << ")";
  if (order.size() > shown) std::cout << fmt::format(" and {} more", order.size() - shown);
  std::cout << "\n";
}

}  // namespace

int inspect_output_folder(const std::string& out_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool merged = fs::is_regular_file(fs::path(out_dir) / "manifest.jsonl", ec);
  int parts = 0;
  if (fs::is_directory(fs::path(out_dir) / ".manifest", ec))
    for (const auto& e : fs::directory_iterator(fs::path(out_dir) / ".manifest", ec))
      parts += e.path().extension() == ".jsonl";
  if (!merged && parts == 0) fail_input("{}: no manifest.jsonl here (is it the --out folder of a generate run?)", out_dir);

  Interned names;
  std::unordered_map<int64_t, ImageLine> images;
  std::set<std::string> tars;  // named by a line (a later line may name another file for its image)
  static const std::set<std::string> kFields = {"status", "file",  "file_stat", "member", "json_file", "model", "model_checksum",
                                                "width",  "height", "steps",    "cfg",   "run_id"};
  ManifestDamage damage;
  for_each_manifest_line(out_dir, [&](int64_t index, const nlohmann::json& line) {
    ImageLine& image = images[index];
    image.ok = text_of(line, "status") == "ok";
    image.where = line.contains("member")                                ? Where::Tar
                  : line.contains("json_file")                           ? Where::Staged
                  : text_of(line, "file").find('/') != std::string::npos ? Where::Subfolder
                                                                          : Where::Flat;
    if (image.where == Where::Tar) tars.insert(text_of(line, "file"));
    image.on_disk = image.ok ? on_disk(out_dir, line) : OnDisk::Missing;
    image.model = names.id(fmt::format("{} {}", text_of(line, "model"), text_of(line, "model_checksum").substr(0, 12)));
    image.settings = names.id(fmt::format("{}x{}, {} steps, cfg {}", text_of(line, "width"), text_of(line, "height"),
                                          text_of(line, "steps"), text_of(line, "cfg")));
    image.run = names.id(text_of(line, "run_id"));
  }, kFields, &damage);

  int64_t ok = 0, failed = 0, lowest = INT64_MAX, highest = INT64_MIN;
  std::map<Where, int64_t> where;
  std::map<OnDisk, int64_t> disk;
  std::map<uint32_t, int64_t> models, settings, runs;
  for (const auto& [index, image] : images) {
    lowest = std::min(lowest, index);
    highest = std::max(highest, index);
    (image.ok ? ok : failed) += 1;
    if (!image.ok) continue;
    ++where[image.where];
    ++disk[image.on_disk];
    ++models[image.model];
    ++settings[image.settings];
    ++runs[image.run];
  }
  const std::vector<std::string> folders = output_subfolders(out_dir);
  std::cout << out_dir << ": the output folder of a generate run\n";
  if (images.empty()) {
    std::cout << "  no image listed yet\n";
  } else {
    std::cout << fmt::format("  images listed: {} ({} ok, {} failed), indices {}..{}", images.size(), ok, failed,
                             lowest, highest);
    const int64_t gaps = highest - lowest + 1 - std::ssize(images);
    std::cout << (gaps > 0 ? fmt::format(" ({} in between not listed)\n", gaps) : "\n");
  }
  if (damage.lines > 0) std::cout << "  warning: " << damage.describe(out_dir) << "\n";
  const int64_t flat = where[Where::Flat], sub = where[Where::Subfolder], staged = where[Where::Staged],
                packed = where[Where::Tar];
  std::string layout = "-";
  if (packed + staged > 0)
    layout = fmt::format("webdataset: {} image(s) in {} tar(s){}", packed, tars.size(),
                         staged ? fmt::format(", {} staged in subfolders (their tars not written yet)", staged) : "");
  else if (sub > 0 && flat == 0)
    layout = fmt::format("sharded ({} subfolder(s){})", folders.size(),
                         folders.empty() ? "" : ": " + folders.front() + ".." + folders.back());
  else if (flat > 0 && sub == 0)
    layout = "flat";
  else if (ok > 0)
    layout = fmt::format("mixed: {} flat, {} in subfolders", flat, sub);
  std::cout << "  layout: " << layout << "\n";
  if (ok > 0) {
    std::cout << fmt::format("  files of the ok images: {} as listed (size, mtime, inode, device)", disk[OnDisk::AsListed]);
    if (disk[OnDisk::Changed]) std::cout << fmt::format(", {} with another stat (ditbatch verify hashes them)", disk[OnDisk::Changed]);
    if (disk[OnDisk::Missing]) std::cout << fmt::format(", {} missing", disk[OnDisk::Missing]);
    if (disk[OnDisk::NotAName]) std::cout << fmt::format(", {} listed under a name outside the folder", disk[OnDisk::NotAName]);
    std::cout << "\n";
    print_counts("models", models, names);
    print_counts("settings", settings, names);
    print_counts("runs", runs, names);
  }
  std::cout << fmt::format("  manifest: {}{}\n",
                           merged ? fmt::format("manifest.jsonl ({} bytes)", fs::file_size(fs::path(out_dir) / "manifest.jsonl", ec))
                                  : std::string("no manifest.jsonl"),
                           parts ? fmt::format(", {} part(s) in .manifest/ not yet merged (a run going on, or killed)", parts)
                                 : std::string());
  const auto report = fs::last_write_time(fs::path(out_dir) / "report.html", ec);
  std::cout << "  report: "
            << (ec ? std::string("none (ditbatch report DIR writes it)")
                   : merged && report < fs::last_write_time(fs::path(out_dir) / "manifest.jsonl", ec)
                       ? std::string("report.html, older than the manifest (ditbatch report DIR rewrites it)")
                       : std::string("report.html"))
            << "\n";
  return 0;
}

}  // namespace ditbatch
