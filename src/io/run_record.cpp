#include "io/run_record.h"
#include "io/json_text.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/fs.h"
#include "core/wall_clock.h"

namespace ditbatch {
namespace fs = std::filesystem;

namespace {
const char* kRunsDir = ".runs";
}

void write_run_record(const std::string& out_dir, const nlohmann::json& record) {
  DITBATCH_CHECK(record.contains("run_id") && record["run_id"].is_string() && record.contains("rank") &&
                     record["rank"].is_number_integer(),
                 "a run record needs run_id and rank");
  const fs::path dir = fs::path(out_dir) / kRunsDir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("{}: cannot create the folder of run records: {}", dir.string(), ec.message());
  const std::string name =
      fmt::format("{}-rank{:05d}.json", record["run_id"].get<std::string>(), record["rank"].get<int64_t>());
  write_file_atomic((dir / name).string(), record.dump() + "\n");
}

std::vector<nlohmann::json> read_run_records(const std::string& out_dir) {
  std::vector<nlohmann::json> records;
  const fs::path dir = fs::path(out_dir) / kRunsDir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return records;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
