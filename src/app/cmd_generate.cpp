#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "app/backends.h"
#include "app/commands.h"
#include "app/options.h"
#include "core/error.h"
#include "core/fs.h"
#include "io/manifest.h"
#include "io/prompt_file.h"
#include "pipeline/qwen_image_pipeline.h"
#include "pipeline/runner.h"
#include "pipeline/stop_signal.h"

namespace ditbatch {

namespace {

// The output folder must exist (or be creatable) and take a file, before any weight is read.
void check_output_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail_input("--out {}: cannot create the folder: {}", dir, ec.message());
  const std::string probe = temp_path_for(dir + "/.ditbatch-write-probe");
  try {
    write_file_atomic(probe, "probe");
  } catch (const Error&) {
    fail_input("--out {}: the folder is not writable", dir);
  }
  std::filesystem::remove(probe, ec);
}

std::string host_name() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

int cmd_generate(const std::vector<std::string>& args) {
  GenerationDefaults defaults;
  std::vector<std::string> prompts;
  std::string prompts_file, weights_path, log_level, backend_kind, output_type, on_signal;
  RunOptions run;
  int64_t max_sequence_length = kDefaultMaxSequenceLength;
  int device = -1;
  po::options_description desc("options");
  desc.add_options()
      ("weights", po::value(&weights_path)->required(), "the ditbatch .h5 (ditbatch convert / make-tiny)")
      ("prompt", po::value(&prompts), "a prompt (repeatable)")
      ("prompts", po::value(&prompts_file), "a .txt (one prompt per line) or .jsonl prompt file")
      ("out", po::value(&run.out_dir)->required(), "output folder: PNGs and manifest.jsonl")
      ("width", po::value(&defaults.width)->default_value(1024), "image width (floored to a multiple of 16)")
      ("height", po::value(&defaults.height)->default_value(1024), "image height (floored to a multiple of 16)")
      ("steps", po::value(&defaults.steps)->default_value(50), "denoising steps")
      ("cfg", po::value(&defaults.cfg)->default_value(4.0), "true CFG scale (1 turns CFG off)")
      ("negative-prompt", po::value(&defaults.negative_prompt)->default_value(" "), "negative prompt (\"\" turns CFG off)")
      ("seed", po::value(&defaults.seed)->default_value(0), "base seed: image i uses seed + i unless it has its own")
      ("max-sequence-length", po::value(&max_sequence_length)->default_value(kDefaultMaxSequenceLength),
       "prompt tokens kept (1..1024)")
      ("output-type", po::value(&output_type)->default_value("png"), "png | latent (also writes <name>.latents.h5)")
      ("overwrite", po::bool_switch(&run.overwrite), "make every image again, even if its PNG is complete")
      ("offload-text-encoder", po::bool_switch(&run.offload_text_encoder),
       "encode all prompts first, free the text encoder, then denoise (lower peak memory)")
      ("on-signal", po::value(&on_signal)->default_value("finish"),
       "on SIGUSR1/SIGTERM: finish | abandon the current image, then stop")
      ("backend", po::value(&backend_kind)->default_value("auto"), "auto | cpu | cuda")
      ("device", po::value(&device)->default_value(-1), "GPU index (default: from the local rank)")
      ("log-level", po::value(&log_level)->default_value("info"), "debug | info | warn | error");
  po::variables_map vm;
  if (!parse_options("generate", "--weights FILE.h5 (--prompt TEXT... | --prompts FILE) --out DIR [options]",
                     "Makes one PNG per prompt, named <index>-<slug>.png (or the prompt's \"name\"), with the\n"
                     "settings in its text chunks and a line per image in DIR/manifest.jsonl. A rerun skips\n"
                     "images that are complete. Defaults are the Qwen-Image model card's: 1024x1024, 50 steps,\n"
                     "true CFG 4.0 with negative prompt \" \".",
                     desc, nullptr, args, vm))
    return 0;
  if (output_type != "png" && output_type != "latent") fail_input("--output-type '{}' (expected png or latent)", output_type);
  run.write_latents = output_type == "latent";
  if (on_signal != "finish" && on_signal != "abandon") fail_input("--on-signal '{}' (expected finish or abandon)", on_signal);
  run.on_signal = on_signal == "abandon" ? OnSignal::Abandon : OnSignal::Finish;
  Log log(0, 1, log_level);

  // ---- everything the user wrote is checked before any weight is read ----
  if (prompts.empty() == prompts_file.empty()) fail_input("give either --prompt (repeatable) or --prompts FILE");
  std::vector<PromptEntry> entries;
  if (!prompts_file.empty()) {
    entries = read_prompt_file(prompts_file);
  } else {
    for (size_t i = 0; i < prompts.size(); ++i) entries.push_back({prompts[i], {}, {}, {}, {}, {}, {}, {}, fmt::format("--prompt #{}", i + 1)});
  }
  std::vector<ImageJob> jobs = resolve_jobs(entries, defaults, log);
  check_output_dir(run.out_dir);
  WeightStore weights = WeightStore::open(weights_path);
  if (jobs.empty()) {
    log.warn("no prompts in {}: nothing to do", prompts_file);
    merge_manifest(run.out_dir);
    return 0;
  }

  install_stop_handlers();
  run.rank = 0;
  run.host = host_name();
  run.run_id = fmt::format("{}-{}", std::chrono::system_clock::now().time_since_epoch().count(), ::getpid());
  std::unique_ptr<Backend> backend = make_backend(backend_kind, device, log);
  QwenImagePipeline pipeline(*backend, weights, log, max_sequence_length);
  std::vector<int64_t> all(jobs.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  ListWork work(all);
  Progress progress(log, static_cast<int64_t>(jobs.size()), true);
  RunSummary summary = run_generation(pipeline, jobs, work, run, OutputProvenance::from(weights, pipeline), progress, log);
  merge_manifest(run.out_dir);
  log.info("summary: {} done, {} skipped, {} failed in {:.1f} s{}", summary.done, summary.skipped, summary.failed,
           summary.seconds, summary.stopped_by_signal ? " (stopped by a signal: rerun to resume)" : "");
  if (summary.stopped_by_signal) return kExitRequeue;
  return summary.failed > 0 ? 1 : 0;
}

}  // namespace ditbatch
