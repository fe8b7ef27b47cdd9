// OUT/manifest.jsonl as a rerun of `generate` reads it to resume: read_manifest, the check that
// complete images were made with this run's settings (check_previous_images, before any
// weight is read) and the per-image skip test (image_is_complete), with and without
// --output-type latent.
//
// Two parsers read these lines: the quick one a rerun scans with (scan_previous_images) and
// nlohmann's, behind read_manifest and image_is_complete; they must agree on every image.
//
// The folder is a real one: the PNGs and latents files of a tiny-model run (fixtures/manifest,
// made by tests/fuzz/make_corpus.sh with the same prompts and settings as here), so a line that
// matches them takes the "complete" paths. Beyond "no crash": an image counts as complete only
// if its PNG in --out has the sha256 its line records.
#include <filesystem>

#include "core/fs.h"
#include "core/log.h"
#include "core/sha256.h"
#include "fuzz_util.h"
#include "io/manifest.h"
#include "io/prompt_file.h"
#include "pipeline/job.h"
#include "pipeline/runner.h"

using namespace ditbatch;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  fuzz::ScratchDir out;
  std::vector<ImageJob> jobs;
  ResumeKey key;

  Fixture() {
    const fs::path source = fuzz::source_path("tests/fuzz/fixtures/manifest");
    for (const auto& e : fs::directory_iterator(source))
      if (e.path().extension() == ".png" || e.path().extension() == ".h5")
        fs::copy_file(e.path(), out / e.path().filename().string());
    // The settings make_corpus.sh generated the fixtures with.
    GenerationDefaults defaults;
    defaults.width = defaults.height = 64;
    defaults.steps = 2;
    jobs = resolve_jobs(read_prompt_file((source / "prompts.jsonl").string()), defaults, Log::quiet());
    key.model_checksum = read_file((source / "model_checksum").string());
    while (!key.model_checksum.empty() && key.model_checksum.back() == '\n') key.model_checksum.pop_back();
    key.max_sequence_length = 512;
  }
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixture& fx = fixture();
  fx.out.write("manifest.jsonl", fuzz::as_text(data, size));
  for (const bool latents : {false, true}) {
    ResumeKey key = fx.key;
    key.with_latents = latents;
    fuzz::parse([&] { check_previous_images(fx.out.path(), fx.jobs, key); });
    fuzz::parse([&] {
      const auto manifest = read_manifest(fx.out.path());
      const PreviousImages scanned = scan_previous_images(fx.out.path(), fx.jobs, key);
      for (const ImageJob& job : fx.jobs) {
        const bool complete = image_is_complete(fx.out.path(), job, key, manifest);
        if (complete != (scanned.state[static_cast<size_t>(job.index)] == PreviousImages::Complete))
          fuzz::finding("image " + std::to_string(job.index) + (complete ? " is" : " is not") +
                        " complete by the full parser, but the scan says otherwise");
        if (!complete) continue;
        const auto& record = manifest.at(job.index);
        const std::string png = fx.out / (job.file_stem + ".png");
        // Trusted without a read only when the stat listed is the file's own (size, mtime in
        // ns, inode, device: a line can name them only by copying them from this very file).
        const bool stat_listed = file_exists(png) && stat_regular_file(png) == recorded_file_stat(record, "file_stat");
        if (!file_exists(png) || !record.at("sha256").is_string() ||
            (!stat_listed && sha256_file(png) != record.at("sha256")))
          fuzz::finding("image " + std::to_string(job.index) +
                        " counts as complete, but its PNG is not the one listed");
      }
    });
  }
  return 0;
}
