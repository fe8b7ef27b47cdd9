#include "pipeline/run_report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "core/build_info.h"
#include "core/fs.h"
#include "core/wall_clock.h"
#include "io/manifest.h"
#include "io/run_record.h"
#include "pipeline/output_check.h"
#include "pipeline/report_page.h"

namespace ditbatch {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A manifest line or run record may have been edited by hand or written by an older
// ditbatch: a field of another type counts as not recorded.
std::string text_of(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<double> number_of(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// Ranks and counts: integers only (a cast of 1e300 to an integer is undefined behaviour), and
// counts up to 2^40, so that their sums cannot overflow.
std::optional<int64_t> integer_of(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

int64_t count_of(const json& j, const char* key) {
  const int64_t v = integer_of(j, key).value_or(0);
  return v >= 0 && v <= (int64_t{1} << 40) ? v : 0;
}

std::optional<double> time_of(const json& j, const char* key) { return parse_utc_iso(text_of(j, key)); }

json or_null(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

// The columns of one gallery row, in the order the page reads them.
const std::vector<std::string> kImageColumns = {
    "index", "file",    "status", "error", "prompt", "negative_prompt", "seed",   "width",   "height", "steps", "cfg",
    "run",   "rank",    "host",   "start", "text_s", "denoise_s",       "vae_s",  "write_s", "total_s"};

struct Image {
  json row;
  std::string run;
  int64_t rank = -1;
  std::optional<double> start, end;
  bool ok = false;
};

// An edit's input images as the gallery shows them beside the output: [path as recorded, link
// relative to the report's folder ("" where no run record says where a relative path lies)].
json input_links(const json& line, const std::map<std::string, std::string>& folders, const fs::path& out_dir) {
  json links = json::array();
  for (const ListedInput& input : listed_inputs(line, folders)) {
    const std::string href =
        input.file.empty() ? "" : fs::absolute(input.file).lexically_normal().lexically_relative(out_dir).string();
    links.push_back(json::array({input.path, href}));
  }
  return links;
}

Image image_of(int64_t index, const json& line) {
  Image im;
  im.run = text_of(line, "run_id");
  im.rank = integer_of(line, "rank").value_or(-1);
  im.ok = text_of(line, "status") == "ok";
  const json timings = line.contains("timings") && line["timings"].is_object() ? line["timings"] : json::object();
  const auto total = number_of(timings, "total_s");
  const double write = number_of(timings, "write_s").value_or(0.0);
  im.start = time_of(line, "started");
  // A line of an older ditbatch has no start: its finish (whole seconds) less its time.
  if (!im.start)
    if (const auto finished = time_of(line, "finished"); finished && total) im.start = *finished - *total - write;
  if (im.start && total) im.end = *im.start + *total + write;
  // The seed is a 64-bit integer: as text, since the page's numbers hold 53 bits.
  const auto seed = line.find("seed");
  const std::string seed_text = seed == line.end() ? "" : seed->is_string() ? seed->get<std::string>() : seed->dump();
  auto field = [&](const char* key) { return line.contains(key) ? line[key] : json(nullptr); };
  // A WebDataset image is a member of its tar: "00012.tar:000012345.png" (the page shows no thumbnail).
  const std::string file = line.contains("member") ? text_of(line, "file") + ":" + text_of(line, "member") : text_of(line, "file");
  im.row = json::array({index, file, text_of(line, "status"), text_of(line, "error"),
                        text_of(line, "prompt"), text_of(line, "negative_prompt"), seed_text, field("width"),
                        field("height"), field("steps"), field("cfg"), im.run, im.rank, text_of(line, "host"),
                        or_null(im.start), or_null(number_of(timings, "text_encoder_s")),
                        or_null(number_of(timings, "transformer_s")), or_null(number_of(timings, "vae_s")),
                        or_null(number_of(timings, "write_s")), or_null(total)});
  return im;
}

// mean, median, 95th percentile and sum of one stage's seconds over the images that have it.
json stage_stats(std::vector<double> v) {
  if (v.empty()) return nullptr;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  auto quantile = [&](double q) { return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)]; };
  return {{"count", v.size()}, {"mean", sum / static_cast<double>(v.size())}, {"median", quantile(0.5)},
          {"p95", quantile(0.95)}, {"sum", sum}};
}

// Settings every image shares go in the header; those that differ are shown per image.
// "loras" and "scheduler": absent from lines written before LoRAs existed.
class SharedSettings {
 public:
  void add(const json& line) {
    for (size_t k = 0; k < kKeys.size(); ++k) {
      if (!shared_[k]) continue;
      const auto it = line.find(kKeys[k]);
      const json& v = it == line.end() ? null_ : *it;
      // As written (4 and 4.0 are two settings to a reader of the lines)
      std::string text = v.dump();
      if (!seen_) first_[k] = v, first_text_[k] = std::move(text);
      else if (text != first_text_[k]) shared_[k] = false;
    }
    seen_ = true;
  }
  json get() const {
    json shared = json::object();
    for (size_t k = 0; k < kKeys.size(); ++k)
      if (seen_ && shared_[k] && !first_[k].is_null()) shared[kKeys[k]] = first_[k];
    return shared;
  }

 private:
  static constexpr std::array<const char*, 9> kKeys = {"width", "height", "steps", "cfg", "negative_prompt",
                                                       "max_sequence_length", "model", "loras", "scheduler"};
  std::array<json, kKeys.size()> first_;
  std::array<std::string, kKeys.size()> first_text_;
  std::array<bool, kKeys.size()> shared_ = {true, true, true, true, true, true, true, true, true};
  bool seen_ = false;
  const json null_ = nullptr;
};

// The fields of a manifest line the report reads (the others are dropped as each line is parsed).
const std::set<std::string> kReportFields = {
    "run_id", "rank",   "status", "timings", "started",  "finished",       "seed",  "width",
    "height", "steps",  "cfg",    "file",    "member",   "error",          "prompt", "negative_prompt",
    "host",   "model",  "model_checksum", "max_sequence_length", "loras", "scheduler", "input_images"};

}  // namespace

json collect_run_report(const std::string& out_dir) {
  const auto records = read_run_records(out_dir);
  const double now = unix_now();

  json rows = json::array();
  std::vector<double> text, denoise, vae, write, total;
  std::map<std::pair<std::string, std::string>, int64_t> models;  // (name, checksum) -> images
  std::set<std::string> hosts;
  struct Lane {
    std::string host, backend;
    std::optional<double> started, loaded, ended;
    json counts;  // done / skipped / failed / stopped_by_signal as the rank recorded them
    int64_t images = 0;
  };
  struct Run {
    std::map<int64_t, Lane> lanes;
    std::optional<double> start, end;
    int64_t ok = 0, failed = 0, planned = 0;
    std::string version;
  };
  std::map<std::string, Run> runs;
  auto widen = [](Run& run, std::optional<double> t) {
    if (!t) return;
    if (!run.start || *t < *run.start) run.start = t;
    if (!run.end || *t > *run.end) run.end = t;
  };
  int64_t ok = 0, failed = 0, images = 0;
  SharedSettings shared;

  // An edit's rows end with their input images, and the columns then name them: a
  // text-to-image page is what it was before edits.
  const auto input_folders = inputs_folders_of_runs(out_dir);
  fs::path out_path = fs::absolute(out_dir).lexically_normal();
  if (out_path.filename().empty()) out_path = out_path.parent_path();
  bool any_inputs = false;
  ManifestDamage damage;  // lines that are not manifest lines: said on the page and by `report`
  // One line at a time: a million-image folder's lines are never all held.
  for_each_last_manifest_line(out_dir, [&](int64_t index, const json& line) {
    ++images;
    shared.add(line);
    Image im = image_of(index, line);
    if (json inputs = input_links(line, input_folders, out_path); !inputs.empty()) {
      im.row.push_back(std::move(inputs));
      any_inputs = true;
    }
    rows.push_back(std::move(im.row));
    im.ok ? ++ok : ++failed;
    models[{text_of(line, "model"), text_of(line, "model_checksum")}]++;
    if (const std::string host = text_of(line, "host"); !host.empty()) hosts.insert(host);
    const json timings = line.contains("timings") && line["timings"].is_object() ? line["timings"] : json::object();
    if (im.ok) {
      if (auto v = number_of(timings, "text_encoder_s")) text.push_back(*v);
      if (auto v = number_of(timings, "transformer_s")) denoise.push_back(*v);
      if (auto v = number_of(timings, "vae_s")) vae.push_back(*v);
      if (auto v = number_of(timings, "write_s")) write.push_back(*v);
      if (auto v = number_of(timings, "total_s")) total.push_back(*v);
    }
    Run& run = runs[im.run];
    Lane& lane = run.lanes[im.rank];
    if (lane.host.empty()) lane.host = text_of(line, "host");
    ++lane.images;
    im.ok ? ++run.ok : ++run.failed;
    widen(run, im.start);
    widen(run, im.end);
  }, kReportFields, &damage);
  for (const json& r : records) {
    Run& run = runs[r["run_id"].get<std::string>()];
    Lane& lane = run.lanes[r["rank"].get<int64_t>()];
    lane.host = text_of(r, "host");
    lane.backend = text_of(r, "backend");
    lane.started = time_of(r, "started");
    lane.loaded = time_of(r, "loaded");
    lane.ended = time_of(r, "ended");
    lane.counts = json::object();
    for (const char* key : {"done", "skipped", "failed", "stopped_by_signal"})
      if (r.contains(key)) lane.counts[key] = r[key];
    if (!lane.host.empty()) hosts.insert(lane.host);
    if (auto v = integer_of(r, "images")) run.planned = std::max(run.planned, *v);
    if (run.version.empty()) run.version = text_of(r, "version");
    widen(run, lane.started);
    widen(run, lane.loaded);
    widen(run, lane.ended);
  }

  json runs_json = json::array();
  double gpu_hours = 0;
  int64_t made = 0;
  for (auto& [id, run] : runs) {
    json lanes = json::array();
    bool all_ended = true, any_record = false, stopped = false;
    int64_t done = 0, skipped = 0, failed_in_run = 0;
    for (const auto& [rank, lane] : run.lanes) {
      lanes.push_back({{"rank", rank}, {"host", lane.host}, {"backend", lane.backend},
                       {"started", or_null(lane.started)}, {"loaded", or_null(lane.loaded)},
                       {"ended", or_null(lane.ended)}, {"images", lane.images}, {"counts", lane.counts}});
      if (lane.started) any_record = true;
      if (lane.started && !lane.ended) all_ended = false;
      done += count_of(lane.counts, "done");
      skipped += count_of(lane.counts, "skipped");
      failed_in_run += count_of(lane.counts, "failed");
      const auto signal = lane.counts.find("stopped_by_signal");
      stopped = stopped || (signal != lane.counts.end() && signal->is_boolean() && signal->get<bool>());
    }
    // Without run records (an older ditbatch) the images in the manifest are all that is known.
    if (!any_record) done = run.ok, failed_in_run = run.failed;
    // Times edited by hand can be anything: a wall time that is no number counts as none.
    double wall = run.start && run.end ? *run.end - *run.start : 0.0;
    if (!std::isfinite(wall)) wall = 0.0;
    const auto ranks = static_cast<double>(run.lanes.size());
    gpu_hours += wall * ranks / 3600.0;
    made += done;
    runs_json.push_back({{"id", id}, {"start", or_null(run.start)}, {"end", or_null(run.end)}, {"wall_s", wall},
                         {"ranks", run.lanes.size()}, {"lanes", lanes}, {"done", done}, {"skipped", skipped},
                         {"failed", failed_in_run}, {"in_manifest_ok", run.ok}, {"in_manifest_failed", run.failed},
                         {"planned", run.planned}, {"recorded", any_record}, {"ended", any_record && all_ended},
                         {"stopped_by_signal", stopped}, {"version", run.version},
                         {"images_per_hour_per_gpu", wall > 0 ? 3600.0 * static_cast<double>(done) / wall / ranks : 0.0}});
  }
  // Oldest run first; lines of an older ditbatch (no run id) sort by their times like the rest.
  std::sort(runs_json.begin(), runs_json.end(), [](const json& a, const json& b) {
    const double ta = a["start"].is_number() ? a["start"].get<double>() : 0.0;
    const double tb = b["start"].is_number() ? b["start"].get<double>() : 0.0;
    return ta != tb ? ta < tb : a["id"].get<std::string>() < b["id"].get<std::string>();
  });

  json models_json = json::array();
  for (const auto& [model, images] : models)
    models_json.push_back({{"name", model.first}, {"checksum", model.second}, {"images", images}});
  double wall_total = 0;
  for (const json& r : runs_json) wall_total += r["wall_s"].get<double>();

  json columns = kImageColumns;
  if (any_inputs) columns.push_back("inputs");
  json report = {{"folder", out_path.filename().string()},  // (of "out/" too)
               {"generated", now},
               {"generated_by", fmt::format("ditbatch {} ({})", DITBATCH_VERSION, build_commit())},
               {"models", models_json},
               {"shared", shared.get()},
               {"hosts", json(hosts)},
               {"totals",
                {{"images", images},
                 {"ok", ok},
                 {"failed", failed},
                 {"wall_s", wall_total},
                 {"gpu_hours", gpu_hours},
                 {"images_per_hour_per_gpu", gpu_hours > 0 ? static_cast<double>(made) / gpu_hours : 0.0}}},
               {"stages",
                {{"text", stage_stats(text)},
                 {"denoise", stage_stats(denoise)},
                 {"vae", stage_stats(vae)},
                 {"write", stage_stats(write)},
                 {"total", stage_stats(total)}}},
               {"runs", runs_json},
               {"not_manifest_lines", {{"lines", damage.lines}, {"said", damage.describe(out_dir)}}},
               {"columns", std::move(columns)}};
  report["images"] = std::move(rows);  // (moved: an initializer list would copy a million rows)
  return report;
}

std::string write_run_report(const std::string& out_dir, std::string* warning) {
  const std::string path = (fs::path(out_dir) / "report.html").string();
  const json report = collect_run_report(out_dir);
  write_file_atomic(path, render_report_page(report));
  if (warning) *warning = report["not_manifest_lines"]["said"].get<std::string>();
  return path;
}

void write_run_report_after_run(const std::string& out_dir, const Log& log) {
  try {
    log.info("report: {}", write_run_report(out_dir));
  } catch (const std::exception& e) {
    log.warn("{}/report.html cannot be written: {}", out_dir, e.what());
  }
}

}  // namespace ditbatch
