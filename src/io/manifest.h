// DIR/manifest.jsonl: one JSON line per finished image (status "ok" or "failed"), the record
// users join against. While a run goes on, each process appends to its own part file
// (DIR/.manifest/<run>-rank<r>.jsonl), flushed and fsynced per line, so a kill loses nothing;
// merge_manifest folds every part into manifest.jsonl (the last line per index wins).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <string>

namespace ditbatch {

class ManifestPart {
 public:
  ManifestPart(const std::string& out_dir, const std::string& run_id, int rank);
  ~ManifestPart();
  ManifestPart(const ManifestPart&) = delete;
  ManifestPart& operator=(const ManifestPart&) = delete;
  // Appends one line and makes it durable before returning.
  void append(const nlohmann::json& line);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// Every manifest line found in DIR (manifest.jsonl, then the parts), the last one per index.
// A line cut by a kill (no newline, bad JSON) is ignored: its image will be made again.
std::map<int64_t, nlohmann::json> read_manifest(const std::string& out_dir);
// Rewrites DIR/manifest.jsonl atomically from read_manifest(), sorted by index, and removes the
// parts it folded in whose writer is gone (a live writer holds a lock on its part: another
// array task may still be appending). Serialised by a lock file, so concurrent array tasks
// merging into one folder lose nothing. Returns the number of lines.
size_t merge_manifest(const std::string& out_dir);

}  // namespace ditbatch
