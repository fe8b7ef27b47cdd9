// The run report (pipeline/run_report) of a folder whose manifest.jsonl and run record
// (.runs/<run>-rank<r>.json) hold any bytes: files in the input after ">>> manifest.jsonl" and
// ">>> run.json" (fuzz_util.h's split_files). The report is written for any folder at the end
// of every run and by `ditbatch report`, so nothing may refuse or escape here, not even an
// InputError. Beyond "no crash": the page's data block holds no '<', '>' or '&' (no text can
// end the block or become markup), and it reads back as JSON.
#include <filesystem>

#include "fuzz_util.h"
#include "pipeline/report_page.h"
#include "pipeline/run_report.h"

using namespace ditbatch;

namespace {

const fuzz::ScratchDir& folder() {
  static const fuzz::ScratchDir dir;
  static const bool made = std::filesystem::create_directories(dir / ".runs");
  (void)made;
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::ScratchDir& out = folder();
  const auto files = fuzz::split_files(fuzz::as_text(data, size));
  const auto file = [&](const char* name) {
    const auto it = files.find(name);
    return it == files.end() ? std::string() : it->second;
  };
  out.write("manifest.jsonl", file("manifest.jsonl"));
  out.write(".runs/fuzz-rank00000.json", file("run.json"));
  try {
    const std::string block = json_for_html_script(collect_run_report(out.path()));
    if (block.find_first_of("<>&") != std::string::npos) fuzz::finding("markup characters in the report's data block");
    if (!nlohmann::json::accept(block)) fuzz::finding("the report's data block is not JSON");
    (void)render_report_page(nlohmann::json::parse(block));
  } catch (const std::exception& e) {
    fuzz::finding(fuzz::type_name(e) + " escaped the run report: " + e.what());
  }
  return 0;
}
