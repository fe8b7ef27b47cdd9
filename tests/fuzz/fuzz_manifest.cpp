// OUT/manifest.jsonl as a rerun of `generate` reads it to resume: read_manifest, the check that
// complete images were made with this run's settings (check_previous_images, before any
// weight is read) and the per-image skip test (image_is_complete), with and without
// --output-type latent, and for the flat, sharded and WebDataset layouts.
//
// Two parsers read these lines: the quick one a rerun scans with (scan_previous_images) and
// nlohmann's, behind read_manifest and image_is_complete; they must agree on every image.
//
// The folder is a real one: the PNGs and latents files of a tiny-model run (fixtures/manifest,
// made by tests/fuzz/make_corpus.sh with the same prompts and settings as here; the same files
// are in 00000/ under their sharded and WebDataset names, since no byte of them depends on the
// layout, and in 00000.tar), so a line that matches them takes the "complete" paths. Beyond
// "no crash": an image counts as complete only if its PNG in --out (or its member of the tar)
// has the sha256 its line records.
#include <filesystem>
#include <fstream>

#include "core/fs.h"
#include "core/log.h"
#include "core/sha256.h"
#include "fuzz_util.h"
#include "io/manifest.h"
#include "io/prompt_file.h"
#include "io/tar_archive.h"
#include "pipeline/job.h"
#include "pipeline/resume.h"
#include "pipeline/runner.h"

using namespace ditbatch;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  fuzz::ScratchDir out;
  std::vector<ImageJob> flat_jobs, sharded_jobs, tar_jobs;
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
    const auto entries = read_prompt_file((source / "prompts.jsonl").string());
    flat_jobs = resolve_jobs(entries, defaults, Log::quiet(), OutputLayout::parse("flat", "png", kDefaultImagesPerTar));
    sharded_jobs = resolve_jobs(entries, defaults, Log::quiet(), OutputLayout::parse("sharded", "png", kDefaultImagesPerTar));
    fs::create_directory(out / "00000");
    for (size_t i = 0; i < flat_jobs.size(); ++i)
      for (const char* suffix : {".png", ".latents.h5"})
        fs::copy_file(source / flat_jobs[i].file(suffix), out / sharded_jobs[i].file(suffix));
    // WebDataset: the same PNGs staged (with a record beside each) and packed in 00000.tar.
    tar_jobs = resolve_jobs(entries, defaults, Log::quiet(), OutputLayout::parse("flat", "webdataset", kDefaultImagesPerTar));
    TarWriter tar(out / "00000.tar");
    for (size_t i = 0; i < flat_jobs.size(); ++i) {
      const std::string png = read_file((source / flat_jobs[i].file()).string());
      const std::string record = nlohmann::json{{"index", i}, {"sha256", sha256_hex(png)}}.dump();
      fs::copy_file(source / flat_jobs[i].file(), out / tar_jobs[i].file());
      out.write(tar_jobs[i].file(".json"), record);
      tar.add(tar_jobs[i].file_stem + ".png", png);
      tar.add(tar_jobs[i].file_stem + ".json", record);
    }
    tar.commit();
    key.model_checksum = read_file((source / "model_checksum").string());
    while (!key.model_checksum.empty() && key.model_checksum.back() == '\n') key.model_checksum.pop_back();
    key.max_sequence_length = 512;
  }
};

// `size` bytes of `path` from `offset` (what a reader of the tar finds there), "" past its end.
std::string bytes_at(const std::string& path, int64_t offset, int64_t size) {
  std::ifstream f(path, std::ios::binary);
  if (offset < 0 || size < 0 || offset + size > static_cast<int64_t>(fs::file_size(path))) return "";
  std::string bytes(static_cast<size_t>(size), '\0');
  f.seekg(offset);
  f.read(bytes.data(), size);
  return bytes;
}

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixture& fx = fixture();
  fx.out.write("manifest.jsonl", fuzz::as_text(data, size));
  for (const auto* jobs : {&fx.flat_jobs, &fx.sharded_jobs, &fx.tar_jobs}) {
    for (const bool latents : {false, true}) {
      ResumeKey key = fx.key;
      key.with_latents = latents;
      key.images_per_tar = jobs == &fx.tar_jobs ? kDefaultImagesPerTar : 0;
      fuzz::parse([&] { check_previous_images(fx.out.path(), *jobs, key); });
      fuzz::parse([&] {
        const auto manifest = read_manifest(fx.out.path());
        const PreviousImages scanned = scan_previous_images(fx.out.path(), *jobs, key);
        for (const ImageJob& job : *jobs) {
          const bool complete = image_is_complete(fx.out.path(), job, key, manifest);
          const uint8_t state = scanned.state[static_cast<size_t>(job.index)];
          if (complete != (state == PreviousImages::Complete || state == PreviousImages::Packed))
            fuzz::finding("image " + std::to_string(job.index) + (complete ? " is" : " is not") +
                          " complete by the full parser, but the scan says otherwise");
          if (!complete) continue;
          const auto& record = manifest.at(job.index);
          // A packed image is its member of the tar, at the place its line gives.
          const bool member = record.contains("member") && record.at("member").is_string();
          const std::string png = fx.out / (member ? job.tar : job.file());
          // Trusted without a read only when the stat listed is the file's own (size, mtime in
          // ns, inode, device: a line can name them only by copying them from this very file).
          const bool stat_listed = file_exists(png) && stat_regular_file(png) == recorded_file_stat(record, "file_stat");
          if (!file_exists(png) || !record.at("sha256").is_string() ||
              (!stat_listed && (member ? sha256_hex(bytes_at(png, record.at("member_offset"), record.at("member_size")))
                                       : sha256_file(png)) != record.at("sha256")))
            fuzz::finding("image " + std::to_string(job.index) +
                          " counts as complete, but its PNG is not the one listed");
        }
      });
    }
  }
  return 0;
}
