#include "io/run_record.h"

#include <filesystem>

#include "core/error.h"
#include "core/fs.h"
#include "core/wall_clock.h"
#include "io/json_text.h"

namespace ditbatch {
namespace fs = std::filesystem;

namespace {
const char* kRunsDir = ".runs";
constexpr int64_t kMaxRunRecordBytes = int64_t{16} << 20;  // a record is a few KB
}

void write_run_record(const std::string& out_dir, const nlohmann::json& record) {
  DITBATCH_CHECK(record.contains("run_id") && record["run_id"].is_string() && record.contains("rank") &&
                     record["rank"].is_number_integer(),
                 "a run record needs run_id and rank");
  const fs::path dir = fs::path(out_dir) / kRunsDir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("{}: cannot create the folder of run records: {}", dir.string(), ec.message());
  // Never through a link planted at .runs: the record would be written wherever it points.
  if (!fs::is_directory(fs::symlink_status(dir, ec)))
    fail_input("{}: is not a folder (a symbolic link?), which ditbatch does not follow in an output folder; remove it",
               dir.string());
  const std::string name =
      fmt::format("{}-rank{:05d}.json", record["run_id"].get<std::string>(), record["rank"].get<int64_t>());
  write_file_atomic((dir / name).string(), record.dump() + "\n");
}

std::vector<nlohmann::json> read_run_records(const std::string& out_dir) {
  std::vector<nlohmann::json> records;
  const fs::path dir = fs::path(out_dir) / kRunsDir;
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return records;  // a link is not followed
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    // Others may plant anything here: only regular files, never followed, opened without
    // blocking (a FIFO once hung `report`), of a record's size; anything else is skipped.
    std::string text;
    try {
      text = read_file(path.string(), kMaxRunRecordBytes, /*follow_links=*/false);
    } catch (const InputError&) {
      continue;
    }
    nlohmann::json j = parse_json(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("run_id") && j["run_id"].is_string() && j.contains("rank") &&
        j["rank"].is_number_integer())
      records.push_back(std::move(j));
  }
  return records;
}

RunRecordWriter::RunRecordWriter(std::string out_dir, nlohmann::json record, const Log& log)
    : out_dir_(std::move(out_dir)), record_(std::move(record)), log_(log) {
  mark("started");
}

void RunRecordWriter::mark(const std::string& moment, const nlohmann::json& fields) {
  record_[moment] = utc_iso_now();
  for (const auto& [key, value] : fields.items()) record_[key] = value;
  try {
    write_run_record(out_dir_, record_);
  } catch (const std::exception& e) {
    if (!warned_) log_.warn("the run record (for report.html's timeline) cannot be written: {}", e.what());
    warned_ = true;
  }
}

}  // namespace ditbatch
