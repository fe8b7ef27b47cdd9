// scheduler/scheduler_config.json as `generate` reads it from a weight file's /scheduler
// config_json (convert keeps the folder's file verbatim): Config::parse, SchedulerConfig::from,
// then the schedules of a run's images (conditioning_timesteps: every size and step count) and
// the description written into each PNG.
//
// Beyond "no crash": a schedule has steps + 1 sigmas ending in 0 and steps timesteps.
#include "core/log.h"
#include "fuzz_util.h"
#include "io/config.h"
#include "model/scheduler.h"
#include "pipeline/job.h"
#include "pipeline/qwen_image_pipeline.h"

using namespace ditbatch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<ImageJob> jobs = [] {
    std::vector<PromptEntry> entries(3);
    entries[0].prompt = "a";
    entries[1].prompt = "b";
    entries[1].width = 1664;
    entries[1].height = 928;
    entries[2].prompt = "c";
    entries[2].steps = 2;
    return resolve_jobs(entries, GenerationDefaults{}, Log::quiet());
  }();
  fuzz::parse([&] {
    const Config config = Config::parse(std::string(fuzz::as_text(data, size)), "fuzz.h5:/scheduler");
    const SchedulerConfig scheduler = SchedulerConfig::from(config);
    (void)scheduler.describe();
    (void)conditioning_timesteps(scheduler, jobs);
    for (const ImageJob& job : jobs) {
      const Schedule s = make_schedule(scheduler, static_cast<int>(job.steps), job.grid_h() * job.grid_w());
      if (s.sigmas.size() != static_cast<size_t>(job.steps) + 1 ||
          s.timesteps.size() != static_cast<size_t>(job.steps) || s.sigmas.back() != 0.0f)
        fuzz::finding("a schedule of " + std::to_string(job.steps) + " steps has " + std::to_string(s.sigmas.size()) +
                      " sigmas and " + std::to_string(s.timesteps.size()) + " timesteps");
    }
  });
  return 0;
}
