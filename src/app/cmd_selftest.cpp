// `ditbatch selftest`: is this node's backend to be trusted? Every op case against the CPU
// reference, each attention and convolution path, the small pipelines, the machine's figures;
// one table, one verdict, exit 0 (PASS) or 1 (FAIL). Under mpirun / srun every rank checks its
// own GPU and rank 0 prints a row per GPU, flagging one more than 10 % slower than the median.
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "app/backends.h"
#include "app/commands.h"
#include "app/cpu_threads.h"
#include "app/cuda_checks.h"
#include "app/options.h"
#include "app/selftest.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/timer.h"
#include "cpu/cpu_backend.h"
#include "cluster/world.h"
#include "convert/tiny_pipeline.h"
#include "selftest/checks.h"
#include "selftest/op_check.h"
#include "selftest/pipeline_check.h"
#ifdef DITBATCH_HAVE_CUDA
#include "cuda_backend.h"
#include "cuda_device.h"
#endif

namespace ditbatch {

namespace {

struct SelftestOptions {
  std::string backend_kind = "auto", json_path, tokenizer_dir, goldens = "auto", temp_dir, models;
  bool quick = false, verbose = false, measure = true;
  int device = -1, threads = 0;
};

// --models: each name one make-tiny writes (checked before any work), in the order given.
std::vector<std::string> selected_models(const std::string& list) {
  std::vector<std::string> models;
  if (list.empty()) return models;
  const std::vector<std::string> known = tiny_pipeline_models();
  std::stringstream items(list);
  for (std::string name; std::getline(items, name, ',');) {
    if (std::find(known.begin(), known.end(), name) == known.end())
      fail_input("--models: '{}' (expected some of {})", name, fmt::join(known, ", "));
    models.push_back(name);
  }
  return models;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// One rank's line in the allocation's table.
nlohmann::json rank_row(const World& world, const selftest::Report& r, double seconds) {
  return {{"rank", world.rank()},
          {"host", world.host()},
          {"local_rank", world.local_rank()},
          {"device", r.environment_value("device")},
          {"gpu_uuid", r.environment_value("gpu uuid")},
          {"verdict", r.verdict()},
          {"passed", r.passed()},
          {"gemm", r.measured("gemm")},
          {"copy", r.measured("copy")},
          {"gemm_unit", "TFLOP/s"},
          {"seconds", seconds},
          {"report", r.to_json()}};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Rank 0's table of every rank: host, local rank, GPU, verdict, GEMM and copy throughput, and
// a flag on any figure more than 10 % below the median. Returns how many ranks failed.
int print_allocation(const std::vector<nlohmann::json>& rows) {
  std::vector<double> gemm, copy;
  for (const auto& r : rows) gemm.push_back(r["gemm"].get<double>()), copy.push_back(r["copy"].get<double>());
  const double gemm_median = median(gemm), copy_median = median(copy);
  int failed = 0, slow = 0;
  std::printf("\n  %-5s %-20s %-5s %-34s %-6s %12s %10s\n", "rank", "host", "local", "device (uuid)", "result",
              "gemm TFLOP/s", "copy GB/s");
  for (const auto& r : rows) {
    const bool ok = r["passed"].get<bool>();
    failed += !ok;
    const double g = r["gemm"].get<double>(), c = r["copy"].get<double>();
    const bool slow_gemm = g < 0.9 * gemm_median, slow_copy = c < 0.9 * copy_median;
    slow += slow_gemm || slow_copy;
    std::string device = r["device"].get<std::string>();
    if (!r["gpu_uuid"].get<std::string>().empty()) device += " (" + r["gpu_uuid"].get<std::string>().substr(0, 8) + ")";
    std::printf("  %-5d %-20.20s %-5d %-34.34s %-6s %12.3g %10.3g%s\n", r["rank"].get<int>(),
                r["host"].get<std::string>().c_str(), r["local_rank"].get<int>(), device.c_str(), ok ? "PASS" : "FAIL",
                g, c,
                slow_gemm || slow_copy ? fmt::format("  SLOW: >10% below the median ({:.3g} / {:.3g})", gemm_median,
                                                     copy_median)
                                             .c_str()
                                       : "");
    if (!ok) std::printf("        %s\n", r["verdict"].get<std::string>().c_str());
  }
  if (slow) std::printf("  %d rank(s) more than 10%% below the median: look at those GPUs before a long job\n", slow);
  return failed;
}

}  // namespace

int cmd_selftest(const std::vector<std::string>& args) {
  SelftestOptions o;
  po::options_description desc("options");
  desc.add_options()
      ("backend", po::value(&o.backend_kind)->default_value("auto"), "auto | cuda | cpu")
      ("quick", po::bool_switch(&o.quick), "one case per op, the small pipeline, the GEMM and copy figures")
      ("json", po::value(&o.json_path), "also write the whole report (every rank's) as JSON to FILE")
      ("device", po::value(&o.device)->default_value(-1), "GPU index (default: local rank modulo the visible GPUs)")
      ("threads", po::value(&o.threads)->default_value(0), "CPU threads (default: OMP_NUM_THREADS, else cores / ranks on the node)")
      ("tokenizer", po::value(&o.tokenizer_dir), "the tokenizer make-tiny copies (default: the source tree's)")
      ("goldens", po::value(&o.goldens)->default_value("auto"),
       "diffusers' tiny pipeline and outputs: DIR, auto (the source tree's tests/data/golden) or none")
      ("temp-dir", po::value(&o.temp_dir), "where the tiny models are written and removed (default: $TMPDIR or /tmp)")
      ("models", po::value(&o.models),
       "the families whose tiny pipeline is checked, comma-separated, as make-tiny names them (default: all)")
      ("no-measure", "skip the throughput figures (a GPU others are using; the CPU emulation)")
      ("verbose", po::bool_switch(&o.verbose), "a line for every check, not only failures");
  po::variables_map vm;
  if (!parse_options("selftest", "[--backend auto|cuda|cpu] [--quick] [--json FILE]",
                     "Checks that this node's backend can be trusted before a long job: every op against the\n"
                     "CPU reference (float64 loops for the CPU backend), each attention and convolution path\n"
                     "of the GPU, a small pipeline against the CPU and against diffusers' own outputs, and the\n"
                     "machine's GEMM, copy and attention throughput. Prints one table and a verdict: PASS\n"
                     "(exit 0) or FAIL naming every failing check (exit 1). Under mpirun/srun every rank\n"
                     "checks its own GPU and rank 0 prints one row per GPU.",
                     desc, nullptr, args, vm))
    return 0;
  if (o.backend_kind != "auto" && o.backend_kind != "cpu" && o.backend_kind != "cuda")
    fail_input("--backend '{}' (expected auto, cuda or cpu)", o.backend_kind);
  o.measure = !vm.count("no-measure");
  const std::vector<std::string> models = selected_models(o.models);
  if (o.threads < 0) fail_input("--threads {} must be at least 1 (0: cores / ranks on the node)", o.threads);
  if (o.device < -1) fail_input("--device {} must be a GPU index (0, 1, ...)", o.device);
  // Bad paths are bad input (exit 2), said before the check runs, not a FAIL verdict of the node.
  if (!o.json_path.empty()) check_output_file("--json", o.json_path);
  if (!o.temp_dir.empty() && !std::filesystem::is_directory(o.temp_dir))
    fail_input("--temp-dir {}: {}", o.temp_dir,
               std::filesystem::exists(o.temp_dir) ? "is not a folder" : "no such folder");
  if (o.goldens != "none" && o.goldens != "auto" &&
      !(file_exists(o.goldens + "/pipeline.h5") && file_exists(o.goldens + "/tiny-pipeline/model_index.json")))
    fail_input("--goldens {}: expected a folder holding pipeline.h5 and tiny-pipeline/ (tests/data/golden of a "
               "checkout), or none", o.goldens);

  // A tokenizer given by name must be one (without it the pipeline checks are skipped, which
  // is no verdict on the node).
  if (!o.tokenizer_dir.empty()) checked_tokenizer_folder(o.tokenizer_dir);

  World world(nullptr, nullptr);
  Stopwatch watch;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  omp_set_num_threads(threads_per_rank(o.threads, world));  // OMP_NUM_THREADS as generate reads it

  const int gpus = o.backend_kind == "cpu" ? 0 : visible_gpu_count();
  if (o.backend_kind == "cuda" && gpus == 0) {
#ifdef DITBATCH_HAVE_CUDA
    std::cout << "FAIL: --backend cuda: no usable GPU (" << cuda_describe_devices() << ")\n";
#else
    std::cout << "FAIL: --backend cuda: this ditbatch was built without CUDA (-DDITBATCH_CUDA=OFF)\n";
#endif
    return 1;
  }
  const bool cuda = gpus > 0;
  const int device = cuda ? (o.device >= 0 ? o.device : world.local_rank() % gpus) : -1;
  if (cuda && device >= gpus) fail_input("--device {}: only {} GPU(s) visible", o.device, gpus);
  const std::string goldens = o.goldens == "none" ? "" : o.goldens == "auto" ? selftest::find_goldens() : o.goldens;

  selftest::Report report;
  report.environment("ditbatch", fmt::format("{} ({})", DITBATCH_VERSION, build_commit()));
  report.environment("host", fmt::format("{} (rank {} of {}, local rank {})", world.host(), world.rank(), world.size(),
                                         world.local_rank()));
  report.environment("cpu", fmt::format("{}, {} cores, {} threads used", cpu_model(), cores, omp_get_max_threads()));
  report.environment("backend", cuda ? "cuda" : "cpu");
  report.environment("device", cuda ? fmt::format("cuda:{}", device) : "cpu");
  Log log(world.rank(), world.size(), "warn");

  selftest::BackendFactory make;
  std::vector<DType> modes;
  if (cuda) {
#ifdef DITBATCH_HAVE_CUDA
    describe_cuda(report, device);
    make = [device](DType act) -> std::unique_ptr<Backend> {
      CudaBackendOptions opt = CudaBackendOptions::from_env(device);
      opt.act_dtype = act;
      opt.poison = true;             // an element a kernel leaves unwritten shows as NaN
      opt.sync_each_op = true;       // a fault names its op
      opt.cudnn_self_check = false;  // cuDNN's own output is what is checked
      return std::make_unique<CudaBackend>(opt, Log(0, 1, "warn"));
    };
    modes = {DType::BF16, DType::F32};
#endif
  } else {
    make = [](DType) -> std::unique_ptr<Backend> { return std::make_unique<CpuBackend>(); };
    modes = {DType::F32};
  }

  selftest::check_ops(report, make, modes, o.quick);
#ifdef DITBATCH_HAVE_CUDA
  if (cuda) check_cuda_paths(report, device, o.quick);
#endif
  selftest::PipelineCheckOptions p;
  p.quick = o.quick;
  p.tokenizer_dir = o.tokenizer_dir;
  p.goldens = goldens;
  if (o.goldens == "none") p.no_goldens_why = "not asked for (--goldens none)";
  p.temp_dir = o.temp_dir;
  p.models = models;
  for (const DType act : modes) {
    if (o.quick && act != modes.front()) continue;
    selftest::check_pipelines(report, make, act, p, log);
  }
  if (o.measure) try {
      std::unique_ptr<Backend> production = cuda ? make_backend("cuda", device, Log::quiet())
                                                 : std::unique_ptr<Backend>(std::make_unique<CpuBackend>());
      selftest::measure(report, *production, o.quick);
    } catch (const std::exception& e) {
      report.add_error("measured", e.what());
    }
  const double seconds = watch.seconds();

  // ---- rank 0 prints its own table and, under MPI, one row per rank ----
  const std::vector<std::string> rows = world.gather(rank_row(world, report, seconds).dump(), 0);
  int failed_ranks = 0;
  if (world.rank() == 0) {
    std::cout << "ditbatch selftest" << (o.quick ? " --quick" : "") << "\n" << report.table(o.verbose);
    std::vector<nlohmann::json> all;
    for (const auto& r : rows) all.push_back(nlohmann::json::parse(r));
    if (world.size() > 1) failed_ranks = print_allocation(all);
    else failed_ranks = report.passed() ? 0 : 1;
    if (!o.json_path.empty()) {
      nlohmann::json j{{"command", "selftest"}, {"quick", o.quick}, {"ranks", all}};
      write_file_atomic(o.json_path, j.dump(2) + "\n");
    }
    std::cout << "\n";
    if (world.size() > 1)
      std::cout << (failed_ranks ? fmt::format("FAIL: {} of {} rank(s) failed", failed_ranks, world.size())
                                 : fmt::format("PASS: all {} rank(s)", world.size()))
                << fmt::format(" in {:.1f} s", seconds) << "\n";
    else
      std::cout << report.verdict() << fmt::format(" in {:.1f} s", seconds) << "\n";
  }
  std::cout.flush();
  return world.max(failed_ranks) > 0 || world.max(report.passed() ? 0 : 1) > 0 ? 1 : 0;
}

std::string preflight_failure(Backend& be) {
  for (const selftest::OpCase& c : selftest::quick_op_cases()) {
    const selftest::OpCheck r = selftest::check_op_case(be, c);
    if (r.passed()) continue;
    std::string path;
#ifdef DITBATCH_HAVE_CUDA
    if (auto* cuda = dynamic_cast<CudaBackend*>(&be)) {
      const CudaBackendStats st = cuda->stats();
      if (c.name.rfind("attention", 0) == 0) path = " (cuDNN SDPA " + st.sdpa_status + ")";
      if (c.name.rfind("conv2d", 0) == 0) path = " (cuDNN convolution " + st.conv_status + ")";
    }
#endif
    return fmt::format("{} in {} mode on {}{}: {}", c.name, r.mode, be.name(), path, r.failure);
  }
  return "";
}

}  // namespace ditbatch
