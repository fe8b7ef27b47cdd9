#include "cluster/run_plan.h"

#include <omp.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <string_view>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cluster/decide_on_rank0.h"
#include "core/error.h"
#include "core/fs.h"
#include "cpu/cpu_backend.h"
#include "io/manifest.h"
#include "io/prompt_file.h"
#include "pipeline/denoiser_setup.h"
#include "pipeline/host_plan.h"
#include "pipeline/image_model.h"
#include "pipeline/input_images.h"
#include "pipeline/resume.h"
#include "pipeline/run_report.h"
#include "pipeline/tar_shards.h"

namespace ditbatch {

// The weight file's scheduler, or the one --scheduler / --scheduler-config puts in its place.
SchedulerConfig chosen_scheduler(const RunRequest& o, const WeightStore& weights) {
  return resolve_scheduler(SchedulerConfig::from(weights.component("scheduler").config()), o.scheduler,
                           o.scheduler_config);
}


namespace {

// The output folder must exist (or be creatable) and take a file, before any weight is read.
void check_output_dir(const std::string& dir) {
  if (dir.empty()) fail_input("--out '': name the output folder (it is made if it does not exist)");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail_input("--out {}: cannot create the folder: {}", dir, ec.message());
  // The way a PNG is written (temporary name, fsync, rename), under a name of its own.
  const std::string probe = dir + "/.ditbatch-write-probe";
  try {
    write_file_atomic(probe, "probe");
  } catch (const Error& e) {
    fail_input("--out {}: the folder is not writable ({})", dir, e.what());
  }
  std::filesystem::remove(probe, ec);
  // What the run keeps in the folder must be what it seems: the folder may be writable by
  // others, and a link planted at one of these names would have the run read or write
  // whatever it points to (nothing in --out is ever followed).
  for (const auto& [name, what] : {std::pair{"manifest.jsonl", "a file: the run keeps its list of images there"},
                                   std::pair{".manifest", "a folder: the run keeps its manifest parts there"},
                                   std::pair{".runs", "a folder: the run keeps its run records there"},
                                   std::pair{".manifest.lock", "a file: the manifest's lock"},
                                   std::pair{".ditbatch-run.lock", "a file: the run's lock"}}) {
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    const bool folder = std::string_view(what).starts_with("a folder");
    if (S_ISLNK(st.st_mode) || (folder ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)))
      fail_input("--out {}: {} is not {} (it is {}); remove it", dir, path, what,
                 S_ISLNK(st.st_mode) ? "a symbolic link" : describe_file_type(st.st_mode));
  }
}

// The family's settings with the command line's in place; an option the family does not take is
// refused, naming it, the model and what to do.
void apply_family_settings(RunRequest& o, const ImageModel& model) {
  const std::string model_name = fmt::format("{} ({})", model.family(), model.pipeline_class());
  GenerationDefaults d = model.generation_defaults();
  const GivenSettings& g = o.given;
  // A side given as 0 is out of range, not "from the input images" (only leaving it out is).
  for (const auto& [side, name] : {std::pair{g.width, "--width"}, std::pair{g.height, "--height"}})
    if (side && *side < 1) fail_input("{} {} is out of range (a side is at least {} pixels)", name, *side, kMinImageSide);
  if (g.width) d.width = *g.width;
  if (g.height) d.height = *g.height;
  if (g.steps) d.steps = *g.steps;
  if (g.cfg) d.cfg = *g.cfg;
  if (g.negative_prompt) d.negative_prompt = *g.negative_prompt;
  d.seed = o.defaults.seed;
  o.defaults = d;
  const int64_t limit = model.max_sequence_length_limit();
  if (g.max_sequence_length && limit == 0)
    fail_input("--max-sequence-length {}: {} encodes the whole prompt and takes no limit; remove the option",
               *g.max_sequence_length, model_name);
  if (g.max_sequence_length && *g.max_sequence_length > limit)
    fail_input("--max-sequence-length {}: must be 1..{}, as diffusers allows", *g.max_sequence_length, limit);
  o.max_sequence_length = g.max_sequence_length.value_or(model.default_max_sequence_length());
}

// A --scheduler preset ditbatch knows (resolve_scheduler has checked the name) that is another
// family's.
void check_family_scheduler(const RunRequest& o, const ImageModel& model) {
  const std::string model_name = fmt::format("{} ({})", model.family(), model.pipeline_class());
  const std::vector<std::string> presets = model.scheduler_presets();
  if (o.scheduler != "model" && std::find(presets.begin(), presets.end(), o.scheduler) == presets.end())
    fail_input("--scheduler {}: {} takes {}; use --scheduler model (the weight file's) or --scheduler-config FILE",
               o.scheduler, model_name,
               presets.empty() ? std::string("no preset") : fmt::format("the preset(s) {}", fmt::join(presets, ", ")));
}


DenoiserSetup denoiser_setup(const RunRequest& o, const WeightStore& weights, const LoraSet& loras) {
  return DenoiserSetup::of(loras, chosen_scheduler(o, weights), SchedulerConfig::from(weights.component("scheduler").config()),
                           o.text_positions);
}

// What an image of this run is made with, as a previous run's record of it is compared: the one
// key of the run (the runner's, from the loaded pipeline, says the same).
ResumeKey resume_key(const RunRequest& o, const WeightStore& weights, const DenoiserSetup& denoiser) {
  return {weights.checksum(), o.max_sequence_length, o.run.write_latents, denoiser, o.layout.tar_size()};
}

// The CPU backend: refuse what cannot fit in memory, and announce what will take hours (an
// 8192x8192 image: days), with the numbers, before any weight is read.
void check_cpu_run(const ImageModel& model, const std::vector<ImageJob>& jobs, const RunRequest& o,
                   const World& world, const Log& log) {
  const HostRunPlan plan = model.host_run(jobs, std::min<int64_t>(o.max_sequence_length, 64));
  check_host_memory(plan, o.run.offload_text_encoder, host_memory(), world.local_size());
  if (!plan.costliest) return;
  CpuBackend backend;
  const double rate = measure_flops_per_second(backend);
  const double seconds = plan.image_flops / rate;
  constexpr double kLongImageSeconds = 1800;
  if (seconds < kLongImageSeconds) return;
  const ImageJob& job = *plan.costliest;
  log.warn("image {} ({}), {}x{} with {} steps{}, takes at least {} on the CPU backend ({:.2g} FLOP at the {:.0f} "
           "GFLOP/s this machine's matrix product reaches now); a smaller size or a GPU is faster. A second "
           "signal ends the run at once",
           job.index, job.origin, job.width, job.height, job.steps, job.true_cfg ? " and CFG" : "",
           seconds >= 2 * 3600 ? fmt::format("{:.1f} hours", seconds / 3600) : fmt::format("{:.0f} minutes", seconds / 60),
           plan.image_flops, rate / 1e9);
}

// Everything the user wrote, checked by rank 0 before any weight is read: the job list (and the
// LoRA set, every file read and checked against the transformer, as JSON; and what the folder's
// manifest says of each image, read once here for the whole start). The weight file is opened
// into `weights`, which the rest of the run uses.
std::vector<ImageJob> validate_input(RunRequest& o, const World& world, const Log& log,
                                     std::string& loras_json, PreviousImages& previous,
                                     std::optional<WeightStore>& weight_file) {
  if (o.prompts.empty() == o.prompts_file.empty()) fail_input("give either --prompt (repeatable) or --prompts FILE");
  if (!o.images.empty() && !o.prompts_file.empty())
    fail_input("--image is for --prompt; a prompt file gives each line's input images as \"image\"");
  std::vector<PromptEntry> entries;
  if (!o.prompts_file.empty()) {
    entries = read_prompt_file(o.prompts_file);
    // A job script whose prompt file is empty (a broken path, a failed export) must not
    // "succeed" with nothing made. An empty slice of a non-empty file is fine (more array
    // tasks than prompts).
    if (entries.empty())
      fail_input("{}: no prompts (the file is empty, or holds only blank and # comment lines)", o.prompts_file);
  } else {
    for (size_t i = 0; i < o.prompts.size(); ++i) {
      PromptEntry e;
      e.prompt = o.prompts[i];
      e.origin = fmt::format("--prompt #{}", i + 1);
      e.images = e.image_files = o.images;  // relative to the current folder
      entries.push_back(std::move(e));
    }
  }
  ArraySlice::resolve(o.array_index, o.array_count);
  const WeightStore& weights = weight_file.emplace(WeightStore::open(o.weights_path));  // a wrong file fails here
  const std::unique_ptr<ImageModel> model = ImageModel::open(weights);  // its configs checked
  apply_family_settings(o, *model);
  std::vector<ImageJob> jobs = resolve_jobs(entries, o.defaults, log, o.layout);
  check_input_image_counts(jobs, *model);
  inspect_input_images(jobs, omp_get_max_threads());
  for (ImageJob& job : jobs) model->settle_input_images(job);
  std::vector<LoraRequest> requests;
  for (const std::string& text : o.loras) requests.push_back(parse_lora_argument(text));
  const LoraSet loras = model->open_loras(requests);
  for (const LoraFile& f : loras.files())
    log.info("LoRA {} ({}, strength {}): {} modules, sha256 {}", f.path, f.formats, f.strength, f.modules,
             f.sha256.substr(0, 12));
  const DenoiserSetup denoiser = denoiser_setup(o, weights, loras);
  check_family_scheduler(o, *model);
  if (o.text_positions != TextPositionMode::Sequential && model->max_input_images() == 0)
    fail_input("--text-positions {}: {} ({}) takes no input image, so its prompts hold no image tokens to number; "
               "remove the option",
               text_position_mode_name(o.text_positions), model->family(), model->pipeline_class());
  if (o.runs_on_cpu && o.runs_on_cpu()) check_cpu_run(*model, jobs, o, world, log);
  check_output_dir(o.run.out_dir);
  if (o.layout.kind != OutputLayout::Kind::Flat) check_output_folders(o.run.out_dir);
  if (!o.run.overwrite) {
    previous = scan_previous_images(o.run.out_dir, jobs, resume_key(o, weights, denoiser));
    check_previous_images(o.run.out_dir, previous);
    warn_of_previous_lines(o.run.out_dir, previous, std::ssize(jobs), log);
  }
  loras_json = loras.to_json();
  return jobs;
}

// --verify-outputs: every rank hashes its share of the slice's listed images (a million PNGs
// are terabytes to read); every rank learns which ones changed in place, to make them again.
std::set<int64_t> verify_outputs(const RunRequest& o, const std::vector<ImageJob>& jobs, const ArraySlice& slice,
                                 const LoraSet& loras, std::optional<WeightStore>& weights, const World& world,
                                 const Log& log) {
  Stopwatch watch;
  const auto [lo, hi] = slice_images(std::ssize(jobs), slice, o.layout.images_per_unit());
  const auto [b, e] = contiguous_range(hi - lo, world.size(), world.rank());
  std::string found = "[]", error;
  try {
    const WeightStore& store = weights ? *weights : weights.emplace(WeightStore::open(o.weights_path));
    const ResumeKey key = resume_key(o, store, denoiser_setup(o, store, loras));
    found = nlohmann::json(outputs_changed_in_place(o.run.out_dir, jobs, lo + b, lo + e, key, log)).dump();
  } catch (const std::exception& ex) {  // the other ranks wait in the gather
    error = ex.what();
  }
  std::string all = "[]";
  const std::vector<std::string> parts = world.gather(nlohmann::json({found, error}).dump(), 0);
  if (world.rank() == 0) {
    nlohmann::json changed = nlohmann::json::array();
    for (const std::string& part : parts) {
      const auto j = nlohmann::json::parse(part);
      if (!j[1].get<std::string>().empty()) error = j[1].get<std::string>();
      for (const auto& i : nlohmann::json::parse(j[0].get<std::string>())) changed.push_back(i);
    }
    all = nlohmann::json({changed, error}).dump();
  }
  const auto result = nlohmann::json::parse(world.broadcast(all, 0));
  if (!result[1].get<std::string>().empty()) fail("--verify-outputs: {}", result[1].get<std::string>());
  std::set<int64_t> changed;
  for (const auto& i : result[0]) changed.insert(i.get<int64_t>());
  if (world.rank() == 0)
    log.info("--verify-outputs: {} listed image(s) hashed on {} rank(s) in {:.1f} s; {} changed in place", hi - lo,
             world.size(), watch.seconds(), changed.size());
  return changed;
}

bool report_is_older_than_manifest(const std::string& out_dir) {
  std::error_code ec;
  const auto report = std::filesystem::last_write_time(out_dir + "/report.html", ec);
  if (ec) return true;
  const auto manifest = std::filesystem::last_write_time(out_dir + "/manifest.jsonl", ec);
  return !ec && report < manifest;
}

// A rerun with no image to make, in a WebDataset folder: rank 0 writes the tars whose images are
// all staged (a run stopped by a signal between its last image and its tar), reading no weight.
void pack_staged_tars(RunRequest& o, const std::vector<ImageJob>& jobs, const ArraySlice& slice,
                      std::vector<uint8_t>& on_disk, const Log& log) {
  const auto [lo, hi] = slice_images(std::ssize(jobs), slice, o.layout.images_per_unit());
  std::optional<ManifestPart> part;
  for (int64_t begin = lo; begin < hi; begin += o.layout.images_per_tar) {
    const int64_t end = std::min(hi, begin + o.layout.images_per_tar);
    if (std::all_of(on_disk.begin() + begin, on_disk.begin() + end, [](uint8_t d) { return d == kPacked; })) continue;
    if (!part) part.emplace(o.run.out_dir, o.run.run_id, 0);
    pack_tar(o.run.out_dir, jobs, begin, end, on_disk, *part, log);
  }
}

std::string default_run_id() {
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* task = std::getenv("SLURM_ARRAY_TASK_ID");
  if (job && *job) return task && *task ? fmt::format("slurm{}-{}", job, task) : fmt::format("slurm{}", job);
  return fmt::format("run{}-{}", std::chrono::system_clock::now().time_since_epoch().count() / 1000000, ::getpid());
}

}  // namespace

void plan_run(RunRequest& o, const World& world, const Log& log, std::optional<WeightStore>& weight_file,
              RunPlan& plan) {
  for (const std::string& text : o.loras) parse_lora_argument(text);  // a strength that is no number: at once
  std::string loras_json;
  PreviousImages previous;  // rank 0's
  decide_on_rank0(world, [&] {
    try {
      plan.jobs = validate_input(o, world, log, loras_json, previous, weight_file);
    } catch (const std::exception& e) {  // whatever stops the check is the input's to mend: exit 2
      throw InputError(*e.what() ? e.what() : "checking the input failed");
    }
  });
  // (one process: the list as it is; a million jobs take seconds to write and read as JSON)
  if (world.size() > 1) plan.jobs = jobs_from_json(world.broadcast(world.rank() == 0 ? jobs_to_json(plan.jobs) : "", 0));
  plan.loras = LoraSet::from_json(world.broadcast(loras_json, 0));
  o.max_sequence_length = std::stoll(world.broadcast(std::to_string(o.max_sequence_length), 0));  // the family's
  o.run.run_id = world.broadcast(world.rank() == 0 ? default_run_id() : "", 0);

  plan.slice = ArraySlice::resolve(o.array_index, o.array_count);  // checked by rank 0 already
  if (o.verify_outputs && !o.run.overwrite)
    o.run.remake = verify_outputs(o, plan.jobs, plan.slice, plan.loras, weight_file, world, log);
  decide_on_rank0(world, [&] {
    for (const std::string& orphan : remove_orphaned_temp_files(o.run.out_dir))
      log.info("removed {} (left by a killed writer)", orphan);
    for (const std::string& folder : output_subfolders(o.run.out_dir))
      for (const std::string& orphan : remove_orphaned_temp_files(o.run.out_dir + "/" + folder))
        log.info("removed {} (left by a killed writer)", orphan);
    const auto [lo, hi] = plan.slice_range(o);
    plan.complete = o.run.overwrite ? std::vector<uint8_t>(plan.jobs.size(), 0) : previous.complete_flags();
    for (const int64_t i : o.run.remake) plan.complete[static_cast<size_t>(i)] = 0;
    plan.remaining = std::count(plan.complete.begin() + lo, plan.complete.begin() + hi, uint8_t{0});
    if (o.run.overwrite) plan.replaced = outputs_to_be_replaced(o.run.out_dir, plan.jobs, lo, hi);
    try {  // (only saves the next rerun its hashing: never stops this one)
      std::set<int64_t> restat;  // this slice's: another array task records its own
      for (const int64_t i : previous.restat)
        if (i >= lo && i < hi) restat.insert(i);
      if (const int64_t n = record_current_stats(o.run.out_dir, restat, o.run.run_id))
        log.info("{} image(s) whole by their sha256, though their stat is not the one listed (a copied folder?): "
                 "their stat recorded, so that a rerun need not read them again",
                 n);
    } catch (const std::exception& e) {
      log.warn("{}: the stat of images found whole by their sha256 cannot be recorded: {}", o.run.out_dir, e.what());
    }
    if (plan.remaining > 0) {
      plan.lock.emplace(o.run.out_dir, lo, hi);
      if (!plan.lock->held())
        log.warn("{}: this file system has no locks; a second run of this job would not be noticed", plan.lock->path());
    }
  });
  plan.remaining = std::stoll(world.broadcast(std::to_string(plan.remaining), 0));
  if (plan.remaining == 0) return;
  // Every rank skips what rank 0 found complete (one byte an image; the ranks read no manifest).
  const std::string flags =
      world.broadcast(world.rank() == 0 ? std::string(plan.complete.begin(), plan.complete.end()) : "", 0);
  plan.complete.assign(flags.begin(), flags.end());
  o.run.complete = plan.complete;
  o.run.rank = world.rank();
  o.run.host = world.host();
  if (world.rank() == 0)
    log.info("{} image(s), {} rank(s) on {} node(s)", plan.jobs.size(), world.size(), world.node_count());
  log.debug("local rank {} ({})", world.local_rank(), world.local_rank_source());
}

int finish_with_nothing_to_make(RunRequest& o, RunPlan& plan, const World& world, const Stopwatch& wall,
                                const Log& log) {
  if (world.rank() != 0) return 0;
  // Every image made, but a tar whose images a stopped run staged is still to write.
  if (o.layout.tars()) pack_staged_tars(o, plan.jobs, plan.slice, plan.complete, log);
  bool folded = false;
  merge_manifest(o.run.out_dir, &folded);
  // The report of a folder nothing was added to is the one there (a million-image page takes
  // longer to write than the rest of this rerun).
  if (folded || report_is_older_than_manifest(o.run.out_dir)) write_run_report_after_run(o.run.out_dir, log);
  const auto [lo, hi] = plan.slice_range(o);
  log.info("summary: 0 done, {} skipped, 0 failed in {:.1f} s on {} rank(s); {}, weights not read", hi - lo,
           wall.seconds(), world.size(),
           hi == lo ? fmt::format("slice {} of {} has no images ({} prompts)", plan.slice.index, plan.slice.count,
                                  plan.jobs.size())
                    : std::string("every image of this slice is complete"));
  return 0;
}

}  // namespace ditbatch
