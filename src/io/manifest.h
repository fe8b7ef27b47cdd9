// DIR/manifest.jsonl: one JSON line per finished image (status "ok" or "failed"), the record
// users join against. While a run goes on, each process appends to its own part file
// (DIR/.manifest/<run>-rank<r>.jsonl), flushed and fsynced per line, so a kill loses nothing;
// merge_manifest folds every part into manifest.jsonl (the last line per index wins).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ditbatch {

class ManifestPart {
 public:
  ManifestPart(const std::string& out_dir, const std::string& run_id, int rank);
  ~ManifestPart();
  ManifestPart(const ManifestPart&) = delete;
  ManifestPart& operator=(const ManifestPart&) = delete;
  // Appends one line and makes it durable before returning.
  void append(const nlohmann::json& line);
  // Appends several lines with one write and one fsync (the images of a tar): a kill leaves
  // whole lines, and at worst a last one without its newline.
  void append(const std::vector<nlohmann::json>& lines);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// The lines of a folder's manifest files that are not manifest lines (not a JSON object with an
// integer "index"; a blank line is not counted): how many, and where the first ones are. Each
// reader skips them (their images count as not made) and says so, naming them. A kill leaves
// at worst a last line without its newline: never counted, since it is never read as a line.
struct ManifestDamage {
  int64_t lines = 0;
  std::vector<std::string> first;  // "manifest.jsonl line 7", ".manifest/<run>-rank00001.jsonl line 3"
  void add(std::string_view file, int64_t line_number);
  // add() unless `text` is blank (a reader's verdict on the line is the caller's).
  void note(std::string_view text, std::string_view file, int64_t line_number);
  // "OUT: 2 line(s) in its manifest files are not manifest lines (...): manifest.jsonl line 7,
  // ...; skipped": one line for a warning; "" when there is none.
  std::string describe(const std::string& out_dir) const;
};

// Every manifest line found in DIR, in the order read (manifest.jsonl, then the parts oldest
// first: for an index, the last line visited is the one that counts), one line parsed at a time
// (a million lines are never all held). A line cut by a kill (no newline, bad JSON), or one that
// is not an object with an integer "index", is skipped: its image will be made again.
// With `fields`, each line holds only those (and "index"): the others are dropped as parsed.
// With `damage`, the lines skipped are counted there.
void for_each_manifest_line(const std::string& out_dir,
                            const std::function<void(int64_t index, const nlohmann::json& line)>& visit,
                            const std::set<std::string>& fields = {}, ManifestDamage* damage = nullptr);
// The same lines as text, in the same order, before any parsing (a reader of a million lines
// parses them its own way: ManifestFieldParser), and the parse for_each_manifest_line makes of
// one: nullopt for a line it skips. `where` is the line's file inside DIR and its number.
struct ManifestLineAt {
  std::string_view file;
  int64_t line_number;
};
void for_each_manifest_text(const std::string& out_dir,
                            const std::function<void(std::string_view line, const ManifestLineAt& where)>& visit);
std::optional<nlohmann::json> parse_manifest_line(std::string_view line, const std::set<std::string>& fields = {});
// All of them, the last one per index (for a folder of a size that fits in memory as JSON).
std::map<int64_t, nlohmann::json> read_manifest(const std::string& out_dir);
// The last line of each index as merge_manifest keeps it, in index order, each parsed only when
// visited (with `fields`, holding only those): a million-line folder is read through without its
// lines held (24 bytes an image), where read_manifest holds every line as JSON. A kept line that
// the full parser skips leaves its index out (as a reader of the merged manifest would).
void for_each_last_manifest_line(const std::string& out_dir,
                                 const std::function<void(int64_t index, const nlohmann::json& line)>& visit,
                                 const std::set<std::string>& fields = {}, ManifestDamage* damage = nullptr);
// Rewrites DIR/manifest.jsonl atomically, the last line per index, sorted by index, and removes
// the parts it folded in whose writer is gone (a live writer holds a lock on its part: another
// array task may still be appending). With no part there, manifest.jsonl is left as it is.
// Serialised by a lock file, so concurrent array tasks merging into one folder lose nothing.
// Returns the number of lines; `folded_any` says whether a part was there.
size_t merge_manifest(const std::string& out_dir, bool* folded_any = nullptr);

}  // namespace ditbatch
