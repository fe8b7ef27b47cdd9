#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <set>
#include <optional>
#include <string_view>

#include "app/backends.h"
#include "app/commands.h"
#include "app/cpu_threads.h"
#include "app/options.h"
#include "app/selftest.h"
#include "cluster/run_plan.h"
#include "core/error.h"
#include "core/fs.h"
#include "cluster/node_weights.h"
#include "cluster/shard.h"
#include "cluster/world.h"
#include "io/manifest.h"
#include "io/h5.h"
#include "io/safetensors.h"
#include "pipeline/memory_plan.h"
#include "pipeline/resume.h"
#include "pipeline/image_model.h"
#include "pipeline/run_report.h"
#include "pipeline/runner.h"
#include "pipeline/stop_signal.h"

namespace ditbatch {

namespace {

// The command line: the run it asks for (planned in cluster/run_plan.h) and how this process runs.
struct GenerateOptions : RunRequest {
  std::string log_level, log_dir, backend_kind, output_type, on_signal, shard, layout_name, output_format;
  int64_t images_per_tar = kDefaultImagesPerTar;
  int device = -1, ranks_per_gpu = 1, threads = 0;
  bool no_selftest = false;
};


// The GPU of this rank: --device, else local rank modulo the visible GPUs (with one GPU per
// task, as --gpus-per-task=1 gives, that is device 0). Ranks of a node that end up on one GPU
// (found by its UUID, whatever index each rank sees) must be allowed by --ranks-per-gpu.
struct DeviceChoice {
  int device = -1;  // -1: no GPU
  int sharing = 1;  // ranks of this node on that GPU
};

DeviceChoice choose_device(const GenerateOptions& o, const World& world, const Log& log) {
  if (o.backend_kind == "cpu") return {};
  const int gpus = visible_gpu_count();
  if (gpus == 0) return {};
  if (o.device >= gpus) fail_input("--device {}: only {} GPU(s) visible", o.device, gpus);
  const int device = o.device >= 0 ? o.device : world.local_rank() % gpus;
  const std::vector<std::string> ids = world.node_allgather(gpu_identity(device));
  const int sharing = static_cast<int>(std::count(ids.begin(), ids.end(), ids[static_cast<size_t>(world.local_rank())]));
  if (sharing > o.ranks_per_gpu)
    fail_input("{} ranks on node {} would share one GPU ({} visible to this rank) and --ranks-per-gpu is {}: start "
               "one rank per GPU, or allow sharing with --ranks-per-gpu {}",
               sharing, world.host(), gpus, o.ranks_per_gpu, sharing);
  log.info("local rank {} -> GPU {} of {} visible ({} rank(s) on it)", world.local_rank(), device, gpus, sharing);
  return {device, sharing};
}

struct RankReport {
  int64_t done = 0, skipped = 0, failed = 0, stopped = 0, weight_bytes = -1, lora_bytes = 0, tars_not_written = 0;
  double seconds = 0;
  std::string host;
};

std::string report_to_json(const RankReport& r) {
  return nlohmann::json{{"done", r.done},       {"skipped", r.skipped},       {"failed", r.failed},
                        {"stopped", r.stopped}, {"weight_bytes", r.weight_bytes}, {"lora_bytes", r.lora_bytes},
                        {"seconds", r.seconds},
                        {"host", r.host}}
      .dump();
}

void print_summary(const std::vector<std::string>& reports, double wall, const std::string& weights_path,
                   bool with_loras, const Log& log) {
  int64_t done = 0, skipped = 0, failed = 0, bytes = 0;
  int slowest = 0;
  double slowest_s = -1;
  for (size_t r = 0; r < reports.size(); ++r) {
    const auto j = nlohmann::json::parse(reports[r]);
    done += j["done"].get<int64_t>();
    skipped += j["skipped"].get<int64_t>();
    failed += j["failed"].get<int64_t>();
    bytes += std::max<int64_t>(0, j["weight_bytes"].get<int64_t>());
    const double s = j["seconds"].get<double>();
    log.info("  rank {} on {}: {} done, {} skipped, {} failed in {:.1f} s ({:.1f} images/hour), weights read {:.1f} MB{}",
             r, j["host"].get<std::string>(), j["done"].get<int64_t>(), j["skipped"].get<int64_t>(),
             j["failed"].get<int64_t>(), s, s > 0 ? 3600.0 * j["done"].get<double>() / s : 0.0,
             j["weight_bytes"].get<double>() / 1e6,
             with_loras ? fmt::format(", LoRA factors read {:.3f} MB", j["lora_bytes"].get<double>() / 1e6) : "");
    if (s > slowest_s) slowest_s = s, slowest = static_cast<int>(r);
  }
  const double per_rank_hour = wall > 0 ? 3600.0 * static_cast<double>(done) / wall / static_cast<double>(reports.size()) : 0;
  log.info("summary: {} done, {} skipped, {} failed in {:.1f} s on {} rank(s); {:.1f} images/hour per rank; slowest "
           "rank {} ({:.1f} s); weights read from {}: {:.1f} MB in all",
           done, skipped, failed, wall, reports.size(), per_rank_hour, slowest, slowest_s, weights_path, bytes / 1e6);
}

}  // namespace

// This rank's share of the run: its backend (a GPU checked against the CPU first), the memory
// plan, the pipeline and the loop. A fatal error on any rank ends the whole job at once (no hang).
RankReport run_this_rank(const GenerateOptions& o, ShardMode requested_shard, const RunPlan& plan, World& world,
                         std::optional<WeightStore>& weight_file, const Log& log) {
  const std::vector<ImageJob>& jobs = plan.jobs;
  RankReport report;
  report.host = world.host();
  try {
    const ShardMode shard = resolve_shard_mode(requested_shard, jobs, o.run.offload_text_encoder);
    std::unique_ptr<WorkSource> work = make_work(shard, plan.slice, std::ssize(jobs), world, o.layout.images_per_unit());
    if (world.rank() == 0)
      log.info("shard {}{}", shard_mode_name(shard),
               plan.slice.count > 1 ? fmt::format(", array slice {} of {}", plan.slice.index, plan.slice.count) : "");
    const DeviceChoice gpu = choose_device(o, world, log);
    std::unique_ptr<Backend> backend = make_backend(o.backend_kind, gpu.device, log);
    if (backend->device() != Device::Host && !o.no_selftest) {  // a GPU is trusted once it agrees with the CPU
      Stopwatch check;
      const std::string failure = preflight_failure(*backend);
      if (!failure.empty())
        fail("the GPU disagrees with the CPU reference, so no image is made: {} (ditbatch selftest tells more; "
             "--no-selftest skips this check)",
             failure);
      log.info("{}: the quick op cases agree with the CPU ({:.1f} s)", backend->name(), check.seconds());
    }
    if (!weight_file) weight_file.emplace(WeightStore::open(o.weights_path));
    WeightStore& weights = *weight_file;
    const SchedulerConfig scheduler = chosen_scheduler(o, weights);
    const std::unique_ptr<ImageModel> model = ImageModel::open(weights);
    if (const auto memory = backend->device_memory()) {  // a GPU: will the run fit? (before any weight is read)
      const DeviceMemoryPlan plan =
          model->device_memory(dtype_size(backend->weight_dtype()), jobs, o.max_sequence_length, scheduler);
      check_device_memory(plan, o.run.offload_text_encoder, *memory, backend->name(), gpu.sharing);
      log.info("GPU memory needed: about {}; {:.1f} GiB free", plan.describe(o.run.offload_text_encoder),
               static_cast<double>(memory->free_bytes) / double(1 << 30));
    }
    auto reader = std::make_shared<NodeWeightReader>(world);
    const int64_t read_before = h5::dataset_bytes_read();  // the weights-once-per-node accounting
    const int64_t lora_read_before = safetensors_bytes_read();
    const std::unique_ptr<ImageGenerator> generator = model->make_generator(*backend, log, o.max_sequence_length, reader);
    ImageGenerator& pipeline = *generator;
    pipeline.use_scheduler(scheduler);
    pipeline.use_text_positions(o.text_positions);
    pipeline.use_loras(plan.loras);
    // This rank's share: known for static shards, an even share for dynamic ones.
    const auto planned = work->planned();
    const int64_t share = planned ? static_cast<int64_t>(planned->size())
                                  : (static_cast<int64_t>(jobs.size()) + world.size() - 1) / world.size();
    Progress progress(log, share, world.size() == 1);
    RunSummary summary =
        run_generation(pipeline, jobs, *work, o.run, OutputProvenance::from(weights, pipeline), progress, log);
    report.done = summary.done;
    report.skipped = summary.skipped;
    report.failed = summary.failed;
    report.stopped = summary.stopped_by_signal;
    report.tars_not_written = summary.tars_not_written;
    report.seconds = summary.seconds;
    report.weight_bytes = h5::dataset_bytes_read() - read_before;
    report.lora_bytes = safetensors_bytes_read() - lora_read_before;
    log.debug("{}: opened {} time(s) by this rank", o.weights_path, WeightStore::times_opened());
  } catch (const std::exception& e) {
    if (world.size() == 1) throw;  // one process: the usual error line and exit status
    log.error("fatal: {}", e.what());
    log.flush();
    world.abort(dynamic_cast<const InputError*>(&e) ? 2 : 1);
  }
  return report;
}

// Collective: rank 0 merges the manifest and prints the summary; the exit status (0, 1 for a
// failed image or tar, kExitRequeue when a signal left images untried) is every rank's.
int gather(const GenerateOptions& o, const RunPlan& plan, const RankReport& report, World& world,
           const Stopwatch& wall, const Log& log) {
  std::vector<std::string> reports = world.gather(report_to_json(report), 0);
  world.barrier();
  if (world.rank() == 0) {
    merge_manifest(o.run.out_dir);
    if (const auto removed = remove_replaced_outputs(o.run.out_dir, plan.replaced); !removed.empty())
      log.info("--overwrite: removed {} file(s) of the images this run replaced under other names ({}{})",
               removed.size(), removed.front(), removed.size() > 1 ? ", ..." : "");
    print_summary(reports, wall.seconds(), o.weights_path, !plan.loras.empty(), log);
  }
  // collective, so on every rank
  const bool stopped = world.max(report.stopped) > 0;
  const int64_t failed = world.sum(report.failed);
  const int64_t tars_not_written = world.sum(report.tars_not_written);
  const int64_t attempted = world.sum(report.done) + world.sum(report.skipped) + failed;
  const auto [lo, hi] = plan.slice_range(o);
  // 75 asks the job script to requeue: only when images were left untried. A signal during
  // the last image leaves nothing to resume (a failed image is retried by a rerun, but a
  // requeue would most likely fail it again: exit 1 says so).
  const int64_t untried = hi - lo - attempted;
  // Last, after the collectives: the other ranks need not wait for it (a large folder takes
  // seconds), and a kill during it (the end of a preemption's grace time) loses no image.
  if (world.rank() == 0) write_run_report_after_run(o.run.out_dir, log);
  if (stopped && untried > 0) {
    if (world.rank() == 0)
      log.warn("stopped by a signal with {} image(s) left: run again (or requeue) to resume", untried);
    return kExitRequeue;
  }
  if (stopped && world.rank() == 0) log.info("a signal came during the last image(s): nothing is left to make");
  if (tars_not_written > 0 && world.rank() == 0)
    log.error("{} tar(s) could not be written; their images are staged and listed: run again to write them",
              tars_not_written);
  return failed > 0 || tars_not_written > 0 ? 1 : 0;
}

int cmd_generate(const std::vector<std::string>& args) {
  install_stop_handlers();  // first: a signal during start-up must not kill the process
  GenerateOptions o;
  std::string seed_text;  // parsed here: Boost reads "-3" into an unsigned as 2^64 - 3
  std::string text_positions;
  po::options_description desc("options");
  desc.add_options()
      ("weights", po::value(&o.weights_path)->required(), "the ditbatch .h5 (ditbatch convert / make-tiny)")
      ("prompt", po::value(&o.prompts), "a prompt (repeatable)")
      ("prompts", po::value(&o.prompts_file), "a .txt (one prompt per line) or .jsonl prompt file")
      ("image", po::value(&o.images)->composing(),
       "an input image of every --prompt, for an edit model (repeatable: Edit-2509/2511 take several, in order); "
       "a prompt file gives each line's as \"image\"")
      ("out", po::value(&o.run.out_dir)->required(), "output folder: PNGs and manifest.jsonl")
      ("width", po::value<int64_t>(),
       "image width (the model's: 1024; an edit model's: the last input image's aspect at about 1024x1024; floored "
       "to a multiple of 16, 2.1: of 32)")
      ("height", po::value<int64_t>(), "image height (the model's: 1024; floored as --width)")
      ("steps", po::value<int64_t>(),
       "denoising steps (the model's: Qwen-Image 50, 2.1 40, 2.1 Turbo its 8 sigmas, Edit 50, Edit-2509/2511 40)")
      ("cfg", po::value<double>(), "true CFG scale, 1 turns CFG off (the model's: Qwen-Image and Edit 4.0, 2.1 1)")
      ("negative-prompt", po::value<std::string>(), "negative prompt (the model's: \" \"); as in diffusers \"\" is one too: --cfg 1 turns CFG off")
      ("seed", po::value(&seed_text)->default_value("0"), "base seed: image i uses seed + i unless it has its own")
      ("max-sequence-length", po::value<int64_t>(),
       "prompt tokens kept, 1..1024 (Qwen-Image: 512 by default; 2.1 and Edit keep the whole prompt and take no "
       "limit)")
      ("lora", po::value(&o.loras)->composing(),
       "FILE[:STRENGTH]: a LoRA merged into the transformer at load (repeatable; strength 1 by default; several "
       "add up). Formats: diffusers/PEFT, Kohya, ComfyUI/LightX2V (diffusion_model.)")
      ("scheduler", po::value(&o.scheduler)->default_value("model"),
       "model (the weight file's) | lightning (Qwen-Image: base_shift = max_shift = ln 3, no shift_terminal: for "
       "the Lightning LoRAs, with --steps 8 --cfg 1)")
      ("text-positions", po::value(&text_positions)->default_value("sequential"),
       "an edit model's image tokens in its text encoder: sequential (as diffusers 0.42.1 numbers them) | mrope "
       "(the 3-D positions the model was trained with; recorded with each image)")
      ("scheduler-config", po::value(&o.scheduler_config),
       "a diffusers scheduler_config.json (FlowMatchEulerDiscreteScheduler) in place of the weight file's")
      ("output-type", po::value(&o.output_type)->default_value("png"), "png | latent (also writes <name>.latents.h5)")
      ("layout", po::value(&o.layout_name)->default_value("flat"),
       "flat (every image in --out) | sharded (subfolders of 10,000 images: 00001/000012345-<slug>.png)")
      ("output-format", po::value(&o.output_format)->default_value("png"),
       "png | webdataset (tar shards NNNNN.tar of --images-per-tar samples, each <index:09d>.png and .json)")
      ("images-per-tar", po::value(&o.images_per_tar)->default_value(kDefaultImagesPerTar),
       "samples per tar with --output-format webdataset (one process makes a tar's images)")
      ("overwrite", po::bool_switch(&o.run.overwrite), "make every image again, even if its PNG is complete")
      ("verify-outputs", po::bool_switch(&o.verify_outputs),
       "hash every listed image before resuming, spread over the ranks (a rerun otherwise trusts a file whose size, "
       "mtime, inode and device are those listed); those whose bytes changed are made again")
      ("offload-text-encoder", po::bool_switch(&o.run.offload_text_encoder),
       "encode all prompts first, free the text encoder, then denoise (lower peak memory)")
      ("on-signal", po::value(&o.on_signal)->default_value("finish"),
       "on SIGUSR1/SIGTERM: finish | abandon the current image, then stop (exit 75)")
      ("shard", po::value(&o.shard)->default_value("auto"), "auto | contiguous | strided | dynamic")
      ("array-index", po::value(&o.array_index)->default_value(-1),
       "this job array task's slice (default: (SLURM_ARRAY_TASK_ID - _MIN) / _STEP)")
      ("array-count", po::value(&o.array_count)->default_value(-1), "slices in all (default: SLURM_ARRAY_TASK_COUNT)")
      ("backend", po::value(&o.backend_kind)->default_value("auto"), "auto | cpu | cuda")
      ("device", po::value(&o.device)->default_value(-1), "GPU index (default: local rank modulo the visible GPUs)")
      ("ranks-per-gpu", po::value(&o.ranks_per_gpu)->default_value(1), "allow this many ranks to share one GPU")
      ("threads", po::value(&o.threads)->default_value(0), "CPU threads per rank (default: OMP_NUM_THREADS, else cores / ranks on the node)")
      ("no-selftest", po::bool_switch(&o.no_selftest),
       "skip the check of the GPU's ops against the CPU made before the weights load")
      ("log-dir", po::value(&o.log_dir), "one log file per rank: DIR/rank-NNNNN.log")
      ("log-level", po::value(&o.log_level)->default_value("info"), "debug | info | warn | error");
  po::variables_map vm;
  if (!parse_options("generate", "--weights FILE.h5 (--prompt TEXT... | --prompts FILE) --out DIR [options]",
                     "Makes one PNG per prompt, named <index>-<slug>.png (or the prompt's \"name\"; --layout sharded\n"
                     "puts them in subfolders of 10,000), with the\n"
                     "settings in its text chunks and a line per image in DIR/manifest.jsonl. A rerun skips\n"
                     "images that are complete, and refuses a DIR whose images were made with other settings.\n"
                     "Defaults are the weight file's model card's: Qwen-Image 1024x1024, 50 steps, true CFG 4.0\n"
                     "with negative prompt \" \"; Qwen-Image-2.1 1024x1024 (sides multiples of 32), 40 steps\n"
                     "(Turbo: its 8 sigmas), CFG off (--cfg 4 runs it with negative prompt \" \"), RGBA PNGs;\n"
                     "Qwen-Image-Edit (50 steps) and Edit-2509/2511 (40 steps) edit each line's \"image\" (or\n"
                     "--image), true CFG 4.0, at the last image's aspect at about 1024x1024 unless given a size.\n"
                     "Under mpirun/srun every rank takes a share.",
                     desc, nullptr, args, vm))
    return 0;
  o.layout = OutputLayout::parse(o.layout_name, o.output_format, o.images_per_tar);  // before --out is touched
  o.run.images_per_tar = o.layout.tar_size();
  if (o.output_type != "png" && o.output_type != "latent")
    fail_input("--output-type '{}' (expected png or latent)", o.output_type);
  if (o.output_type == "latent" && o.layout.tars())
    fail_input("--output-type latent with --output-format webdataset: the tars hold PNGs and their records; write "
               "latents to a png-format folder");
  o.run.write_latents = o.output_type == "latent";
  if (o.on_signal != "finish" && o.on_signal != "abandon")
    fail_input("--on-signal '{}' (expected finish or abandon)", o.on_signal);
  o.run.on_signal = o.on_signal == "abandon" ? OnSignal::Abandon : OnSignal::Finish;
  const ShardMode requested_shard = parse_shard_mode(o.shard);
  if (o.ranks_per_gpu < 1) fail_input("--ranks-per-gpu {} must be at least 1", o.ranks_per_gpu);
  o.defaults.seed = parse_seed(seed_text, "--seed");
  o.text_positions = parse_text_position_mode(text_positions, "--text-positions");
  if (vm.count("width")) o.given.width = vm["width"].as<int64_t>();
  if (vm.count("height")) o.given.height = vm["height"].as<int64_t>();
  if (vm.count("steps")) o.given.steps = vm["steps"].as<int64_t>();
  if (vm.count("cfg")) o.given.cfg = vm["cfg"].as<double>();
  if (vm.count("negative-prompt")) o.given.negative_prompt = vm["negative-prompt"].as<std::string>();
  if (vm.count("max-sequence-length")) o.given.max_sequence_length = vm["max-sequence-length"].as<int64_t>();
  // The backend with the other options, before --out, the lock or the weights are touched.
  // make_backend refuses an unknown kind, or cuda without a usable GPU, before creating
  // anything (its message says why: no CUDA in this build, no device, the driver).
  if (o.backend_kind != "auto" && o.backend_kind != "cpu" && (o.backend_kind != "cuda" || visible_gpu_count() == 0))
    (void)make_backend(o.backend_kind, -1, Log());
  set_abandon_on_first_signal(o.run.on_signal == OnSignal::Abandon);
  // -1 is each option's "not given"; anything else below its range is a mistake, not a default.
  if (o.given.max_sequence_length && *o.given.max_sequence_length < 1)  // the family's largest: once the weights open
    fail_input("--max-sequence-length {}: must be at least 1", *o.given.max_sequence_length);
  if (o.threads < 0) fail_input("--threads {} must be at least 1 (0: cores / ranks on the node)", o.threads);
  if (o.device < -1) fail_input("--device {} must be a GPU index (0, 1, ...)", o.device);
  if (o.array_index < -1) fail_input("--array-index {} must be at least 0", o.array_index);
  if (o.array_count == 0 || o.array_count < -1) fail_input("--array-count {} must be at least 1", o.array_count);

  World world(nullptr, nullptr);
  std::string log_file;
  if (!o.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.log_dir, ec);
    log_file = fmt::format("{}/rank-{:05d}.log", o.log_dir, world.rank());
  }
  Log log(world.rank(), world.size(), o.log_level, log_file, !log_file.empty() && world.rank() != 0);
  acknowledge_stop_signals(world.rank(), world.size(), log.file_descriptor());
  struct Unacknowledge {
    ~Unacknowledge() { stop_acknowledging_signals(); }
  } before_the_log_closes;
  Stopwatch wall;
  const int threads = threads_per_rank(o.threads, world);
  omp_set_num_threads(threads);
  warn_about_threads(threads, world, log);

  RunPlan plan;
  std::optional<WeightStore> weight_file;  // opened once per rank: by the check on rank 0, else when first needed
  o.runs_on_cpu = [&o] { return o.backend_kind == "cpu" || visible_gpu_count() == 0; };
  plan_run(o, world, log, weight_file, plan);
  if (plan.remaining == 0) return finish_with_nothing_to_make(o, plan, world, wall, log);
  RankReport report = run_this_rank(o, requested_shard, plan, world, weight_file, log);
  weight_file.reset();  // the file's mapping, before the merge and the report
  return gather(o, plan, report, world, wall, log);
}

}  // namespace ditbatch
