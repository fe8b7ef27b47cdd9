#include <iostream>

#include "app/commands.h"
#include "app/options.h"
#include "core/error.h"
#include "pipeline/run_report.h"

namespace ditbatch {

int cmd_report(const std::vector<std::string>& args) {
  std::string out_dir;
  const char* about =
      "Writes DIR/report.html from the folder's manifest and run records: one self-contained page\n"
      "(nothing fetched from the network) with the job's header, a gallery of every image beside its\n"
      "prompt and settings (an edit's beside its input images too), the failed images and why, and a\n"
      "timeline per run with a lane per rank.\n"
      "Generate writes it at the end of every run; this writes it at any time (while a job runs, or\n"
      "after several array tasks wrote into one folder).";
  if (!parse_output_folder("report", about, args, out_dir)) return 0;
  std::string warning;
  const std::string page = write_run_report(out_dir, &warning);
  if (!warning.empty()) std::cerr << "warning: " << warning << "\n";
  std::cout << page << "\n";
  return 0;
}

}  // namespace ditbatch
