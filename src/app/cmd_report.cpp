#include <filesystem>
#include <iostream>

#include "app/commands.h"
#include "app/options.h"
#include "core/error.h"
#include "pipeline/run_report.h"

namespace ditbatch {

int cmd_report(const std::vector<std::string>& args) {
  std::string out_dir;
  po::options_description desc("options");
  desc.add_options()("out", po::value(&out_dir)->required(), "the output folder of a generate run");
  po::positional_options_description positional;
  positional.add("out", 1);
  po::variables_map vm;
  if (!parse_options("report", "DIR",
                     "Writes DIR/report.html from the folder's manifest and run records: one self-contained page\n"
                     "(nothing fetched from the network) with the job's header, a gallery of every image beside its\n"
                     "prompt and settings, the failed images and why, and a timeline per run with a lane per rank.\n"
                     "Generate writes it at the end of every run; this writes it at any time (while a job runs, or\n"
                     "after several array tasks wrote into one folder).",
                     desc, &positional, args, vm))
    return 0;
  std::error_code ec;
  if (!std::filesystem::is_directory(out_dir, ec)) fail_input("{}: no such folder", out_dir);
  if (!std::filesystem::exists(std::filesystem::path(out_dir) / "manifest.jsonl", ec) &&
      !std::filesystem::is_directory(std::filesystem::path(out_dir) / ".manifest", ec))
    fail_input("{}: no manifest.jsonl here (is it the --out folder of a generate run?)", out_dir);
  std::cout << write_run_report(out_dir) << "\n";
  return 0;
}

}  // namespace ditbatch
