#include "selftest/checks.h"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/fs.h"
#include "cpu/cpu_backend.h"
#include "convert/tiny_pipeline.h"
#include "pipeline/image_model.h"
#include "selftest/op_cases.h"
#include "selftest/op_check.h"
#include "selftest/pipeline_check.h"

namespace ditbatch::selftest {

namespace {

std::string op_result(const OpCheck& r) {
  std::string s = fmt::format("nmse {:.2g} vs {} (bound {:.0e})", r.error, r.reference, r.bound);
  if (r.error_vs_f64 >= 0) s += fmt::format("; vs float64 {:.2g}, naive bf16 {:.2g}", r.error_vs_f64, r.naive_bf16_vs_f64);
  return s;
}

std::string image_result(const ImageAgreement& a) {
  if (!a.error.empty()) return "";
  return fmt::format("latents nmse {:.2g}, image {:.1f} dB, max diff {}, {:.1f}% equal", a.latents_nmse, a.psnr_db,
                     a.max_pixel_diff, 100.0 * a.equal_fraction);
}

void add_image_rows(Report& report, const std::string& group, const std::vector<ImageJob>& jobs,
                    const std::vector<GeneratedImage>& images, const std::vector<Tensor>& ref_latents,
                    const std::vector<std::vector<uint8_t>>& ref_rgb, const ImageBound& bound,
                    const std::string& against) {
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ImageJob& j = jobs[i];
    const ImageAgreement a = compare_images(images[i], ref_latents[i], ref_rgb[i]);
    const std::string failure = image_failure(a, bound);
    report.add(CheckRow{group,
                        fmt::format("{}x{} {} steps{}, \"{:.24}\"", j.width, j.height, j.steps, j.true_cfg ? " cfg" : "",
                                    j.prompt),
                        failure.empty() ? Status::Pass : Status::Fail,
                        image_result(a) + fmt::format(" vs {}", against),
                        failure});
  }
}

}  // namespace

void check_ops(Report& report, const BackendFactory& make, const std::vector<DType>& modes, bool quick) {
  const std::vector<OpCase> cases = quick ? quick_op_cases() : all_op_cases();
  for (const DType act : modes) {
    const std::string group = fmt::format("ops {}", dtype_name(act));
    std::unique_ptr<Backend> be;
    try {
      be = make(act);
    } catch (const std::exception& e) {
      report.add_error(group, e.what());
      continue;
    }
    for (const OpCase& c : cases) {
      const OpCheck r = check_op_case(*be, c);
      report.add(CheckRow{group, c.name, r.passed() ? Status::Pass : Status::Fail, r.failure.empty() ? op_result(r) : "",
                          r.failure});
    }
    if (quick) continue;
    for (const ShapeMistake& m : all_shape_mistakes()) {
      const std::string failure = shape_mistake_failure(*be, m);
      report.add(CheckRow{group + " shape checks", m.name, failure.empty() ? Status::Pass : Status::Fail,
                          failure.empty() ? "refused, naming " + (m.op.empty() ? std::string("the input") : m.op) : "",
                          failure});
    }
    for (const NonfiniteCase& c : nonfinite_cases()) {
      std::string failure;
      int64_t got = -1;
      try {
        got = be->count_nonfinite(be->upload(c.host, be->act_dtype()));
        if (got != c.expected) failure = fmt::format("counted {} NaN/Inf, {} planted", got, c.expected);
      } catch (const std::exception& e) {
        failure = e.what();
      }
      report.add(CheckRow{group + " NaN guard", c.name, failure.empty() ? Status::Pass : Status::Fail,
                          failure.empty() ? fmt::format("{} found", got) : "", failure});
    }
  }
}

void check_pipelines(Report& report, const BackendFactory& make, DType act, const PipelineCheckOptions& o,
                     const Log& log) {
  const std::string group = fmt::format("pipeline {}", dtype_name(act));
  try {
    TempFolder temp(o.temp_dir, "ditbatch-selftest-");  // the tiny models: ~55 MB each
    std::unique_ptr<Backend> be = make(act);
    const bool on_cpu = be->device() == Device::Host;
    // Each family's tiny model on this backend against the CPU's images.
    for (const std::string& family : o.models.empty() ? tiny_pipeline_models() : o.models) {  // default first
      const std::string label = family == tiny_pipeline_models().front() ? "tiny model" : fmt::format("tiny {} model", family);
      const std::string model = temp / fmt::format("tiny-{}.h5", family);
      try {
        write_tiny_model(model, o.tokenizer_dir, family);
      } catch (const InputError& e) {  // no tokenizer at hand: say so, the other checks still count
        report.add(CheckRow{group, label, Status::Skip, "", e.what()});
        continue;
      }
      const WeightStore weights = WeightStore::open(model);
      const std::vector<ImageJob> jobs = tiny_pipeline_jobs(*ImageModel::open(weights), temp.path());
      std::vector<GeneratedImage> reference;
      std::string against = "the cpu backend";
      if (on_cpu) {
        const int threads = omp_get_max_threads();
        omp_set_num_threads(1);
        reference = run_pipeline(*be, weights, jobs, log);
        omp_set_num_threads(threads);
        against = fmt::format("the cpu at 1 thread (this run: {})", threads);
      } else {
        CpuBackend cpu;
        reference = run_pipeline(cpu, weights, jobs, log);
      }
      const std::vector<GeneratedImage> images = run_pipeline(*be, weights, jobs, log);
      std::vector<Tensor> latents;
      std::vector<std::vector<uint8_t>> pixels;
      for (const auto& r : reference) {
        if (!r.ok) fail("the reference run failed: {}", r.error);
        latents.push_back(r.latents);
        pixels.push_back(r.pixels);
      }
      add_image_rows(report, fmt::format("{} ({})", group, label), jobs, images, latents, pixels,
                     image_bound(act, on_cpu), against);
    }
    if (o.goldens.empty()) {
      report.add(CheckRow{group + " (diffusers)", "goldens", Status::Skip, "", "diffusers' outputs " + o.no_goldens_why});
      return;
    }
    const std::string golden_model = temp / "golden.h5";
    convert_golden_model(o.goldens, golden_model);
    const WeightStore weights = WeightStore::open(golden_model);
    std::vector<ImageJob> jobs;
    std::vector<Tensor> latents;
    std::vector<std::vector<uint8_t>> pixels;
    for (auto& c : golden_cases(o.goldens, o.quick)) {
      jobs.push_back(c.job);
      latents.push_back(c.latents);
      pixels.push_back(std::move(c.pixels));
    }
    const std::vector<GeneratedImage> images = run_pipeline(*be, weights, jobs, log);
    // On the CPU in f32 the bar of the golden tests; elsewhere that of the backend's mode.
    const ImageBound bound = on_cpu ? ImageBound{1e-10, 50.0, 1} : image_bound(act, false);
    add_image_rows(report, group + " (diffusers)", jobs, images, latents, pixels, bound, "diffusers");
  } catch (const std::exception& e) {
    report.add_error(group, e.what());
  }
}

void measure(Report& report, Backend& be, bool quick) {
  try {
    for (auto& m : measure_machine(be, quick)) report.add(std::move(m));
  } catch (const std::exception& e) {
    report.add_error("measured", e.what());
  }
}

}  // namespace ditbatch::selftest
