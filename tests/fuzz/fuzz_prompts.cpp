// A prompt file as `generate --prompts FILE` reads it before any weight: read_prompt_file
// (.txt: one prompt per line; .jsonl: one object per line), then resolve_jobs (sizes, steps,
// cfg, seeds, file names), then the job list as rank 0 hands it to the other ranks. Built twice,
// once per format (DITBATCH_FUZZ_PROMPT_FILE names the file, and so the format).
//
// Beyond "no crash": every accepted image gets a plain file name inside --out (no '/', no
// leading '.', no control byte), and the list the ranks receive equals the one rank 0 made.
#include "core/log.h"
#include "fuzz_util.h"
#include "io/prompt_file.h"
#include "pipeline/job.h"

using namespace ditbatch;

namespace {

void check_file_name(const ImageJob& job) {
  const std::string& stem = job.file_stem;
  bool plain = !stem.empty() && stem[0] != '.' && stem.size() <= 200;
  for (char c : stem) plain = plain && c != '/' && c != '\\' && static_cast<unsigned char>(c) >= 0x20;
  if (!plain)
    fuzz::finding(job.origin + ": accepted the file name \"" + stem + "\", which is not a plain name in --out");
}

bool same_job(const ImageJob& a, const ImageJob& b) {
  return a.index == b.index && a.prompt == b.prompt && a.negative_prompt == b.negative_prompt && a.seed == b.seed &&
         a.width == b.width && a.height == b.height && a.steps == b.steps && a.cfg == b.cfg &&
         a.true_cfg == b.true_cfg && a.file_stem == b.file_stem && a.origin == b.origin;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fuzz::ScratchDir dir;
  static const Log log = Log::quiet();
  const std::string path = dir.write(DITBATCH_FUZZ_PROMPT_FILE, fuzz::as_text(data, size));
  fuzz::parse([&] {
    const std::vector<PromptEntry> entries = read_prompt_file(path);
    const std::vector<ImageJob> jobs = resolve_jobs(entries, GenerationDefaults{}, log);
    for (const ImageJob& job : jobs) check_file_name(job);
    const std::vector<ImageJob> received = jobs_from_json(jobs_to_json(jobs));
    if (received.size() != jobs.size()) fuzz::finding("the job list lost or gained images on its way to the ranks");
    for (size_t i = 0; i < jobs.size(); ++i)
      if (!same_job(jobs[i], received[i])) fuzz::finding(jobs[i].origin + ": the ranks receive another job");
  });
  return 0;
}
