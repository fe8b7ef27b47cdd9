#include "pipeline/runner.h"

#include <map>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/fs.h"
#include "core/timer.h"
#include "core/wall_clock.h"
#include "io/run_record.h"
#include "pipeline/image_writer.h"
#include "pipeline/input_images.h"
#include "pipeline/resume.h"
#include "pipeline/stop_signal.h"
#include "pipeline/tar_shards.h"

namespace ditbatch {

namespace {

// Thrown from the step callback to abandon the current image on a stop signal.
struct Abandoned {};

// What a prompt is encoded with: its text and, for an edit, the job's input images (by content).
struct PromptInput {
  const std::string& text;
  const std::vector<InputImage>& images;
  std::string key() const {
    std::string k = text;
    for (const InputImage& image : images) k += '\0' + image.sha256;
    return k;
  }
};

// Prompt embeddings for the images of one run. With --offload-text-encoder every prompt this
// process will make is encoded up front and kept on the host; the encoder is then freed
// before the denoiser loads. Negative prompts without images (usually the one " ") are encoded
// once; an edit's negative prompt carries its images, so it is encoded per image.
class EmbeddingCache {
 public:
  explicit EmbeddingCache(ImageGenerator& pipeline) : pipeline_(pipeline) {}

  void preencode(const std::vector<PromptInput>& prompts, const Log& log) {
    Stopwatch watch;
    StageTimes ignored;
    for (const PromptInput& p : prompts)
      if (std::string key = p.key(); !host_.count(key)) {
        PromptEmbedding e = pipeline_.encode_prompt(p.text, p.images, &ignored);
        e.embeds = pipeline_.backend().to_host_f32(e.embeds);
        host_[std::move(key)] = std::move(e);
      }
    int64_t bytes = 0;
    for (const auto& [key, e] : host_) bytes += static_cast<int64_t>(e.embeds.nbytes());
    // An edit's embeddings hold its image tokens' rows (~200 to ~1400 a prompt): say what they hold.
    log.info("encoded {} prompts in {:.1f} s ({:.1f} MB of embeddings kept in host memory); releasing the text encoder",
             host_.size(), watch.seconds(), static_cast<double>(bytes) / 1e6);
    pipeline_.release_text_encoder();
  }

  PromptEmbedding get(const PromptInput& prompt, bool reuse, StageTimes& times) {
    const std::string key = prompt.key();
    if (auto it = reused_.find(key); it != reused_.end()) return it->second;
    PromptEmbedding e;
    if (auto it = host_.find(key); it != host_.end()) {
      e = it->second;
      e.embeds = pipeline_.backend().upload(it->second.embeds, DType::F32);
    } else {
      e = pipeline_.encode_prompt(prompt.text, prompt.images, &times);
    }
    if (reuse) reused_[key] = e;
    return e;
  }

 private:
  ImageGenerator& pipeline_;
  std::map<std::string, PromptEmbedding> host_;  // embeds on the host
  std::map<std::string, PromptEmbedding> reused_;
};

}  // namespace

RunSummary run_generation(ImageGenerator& pipeline, const std::vector<ImageJob>& jobs, WorkSource& work,
                          const RunOptions& opt, const OutputProvenance& provenance, Progress& progress,
                          const Log& log) {
  Stopwatch run_watch;
  RunSummary summary;
  ManifestPart manifest(opt.out_dir, opt.run_id, opt.rank);
  nlohmann::json record = {{"run_id", opt.run_id}, {"rank", opt.rank}, {"host", opt.host},
                            {"backend", pipeline.backend().name()}, {"version", build_version()},
                            {"model", provenance.model_name}, {"model_checksum", provenance.model_checksum},
                            {"images", jobs.size()}};
  // Where an edit's relative input paths lie: `verify` and the report look there.
  if (const std::string folder = relative_inputs_folder(jobs); !folder.empty()) record["inputs_folder"] = folder;
  RunRecordWriter run_record(opt.out_dir, std::move(record), log);
  const ResumeKey key{provenance.model_checksum, provenance.max_sequence_length, opt.write_latents, provenance.denoiser,
                      opt.images_per_tar};
  // What the folder holds of each image, the images to make again cleared (the run plan's, or
  // this process's own scan).
  std::vector<uint8_t> complete =
      opt.overwrite ? std::vector<uint8_t>(jobs.size(), 0)
                    : (opt.complete ? *opt.complete : scan_previous_images(opt.out_dir, jobs, key).complete_flags());
  if (!opt.complete)
    for (const int64_t i : opt.remake) complete[static_cast<size_t>(i)] = kNotMade;
  auto done_already = [&](const ImageJob& job) { return complete[static_cast<size_t>(job.index)] != kNotMade; };

  // Load everything before the first image, on every process: loading is collective under MPI.
  EmbeddingCache embeddings(pipeline);
  pipeline.load_text_encoder();
  if (opt.offload_text_encoder) {
    auto planned = work.planned();
    DITBATCH_CHECK(planned.has_value(), "--offload-text-encoder needs a work source that knows its images up front");
    std::vector<PromptInput> prompts;
    for (int64_t i : *planned) {
      const ImageJob& job = jobs[static_cast<size_t>(i)];
      if (done_already(job)) continue;
      prompts.push_back({job.prompt, job.images});
      if (job.true_cfg) prompts.push_back({job.negative_prompt, job.images});
    }
    embeddings.preencode(prompts, log);
  }
  // One image of each schedule this process may make (complete ones included: the set is only
  // ever a superset, and costs no PNG reads): the transformer computes their timesteps'
  // conditioning while it loads.
  std::vector<ImageJob> schedules;
  std::set<std::pair<int64_t, int64_t>> seen;  // (image tokens, steps)
  for (int64_t i : work.candidates()) {
    const ImageJob& job = jobs[static_cast<size_t>(i)];
    if (seen.emplace(job.grid_h() * job.grid_w(), job.steps).second) schedules.push_back(job);
  }
  pipeline.load_denoiser(schedules);
  run_record.mark("loaded");

  const bool tars = opt.images_per_tar > 0;
  bool announced_stop = false;
  ImageWriter writer(opt.out_dir, opt.write_latents, tars);
  // --output-format webdataset: what the folder holds of each image, and the tar being made.
  std::vector<uint8_t> on_disk;
  if (tars) on_disk = complete;
  int64_t tar_begin = -1, tar_end = -1;
  // Packs a tar once each of its images is made; false (the run stops) when it cannot be written.
  auto pack = [&](int64_t begin, int64_t end) {
    try {
      pack_tar(opt.out_dir, jobs, begin, end, on_disk, manifest, log);
      return true;
    } catch (const std::exception& e) {
      ++summary.tars_not_written;
      log.error("{}/{} cannot be written: {}; its images stay staged in {}/ and the next run packs them; stopping",
                opt.out_dir, jobs[static_cast<size_t>(begin)].tar, e.what(), jobs[static_cast<size_t>(begin)].folder);
      return false;
    }
  };
  while (true) {
    if (stop_requested()) {
      stop_deadline_met();  // between images: nothing to abandon
      summary.stopped_by_signal = true;
      log.warn("signal {} received: taking no new images", stop_signal_number());
      if (tars && tar_begin >= 0) pack(tar_begin, tar_end);  // whole if the image just made was its last
      break;
    }
    std::optional<int64_t> next = work.next();
    if (!next) {
      if (tars && tar_begin >= 0) pack(tar_begin, tar_end);  // the last tar, once all of it is made
      break;
    }
    const ImageJob& job = jobs[static_cast<size_t>(*next)];
    if (tars && !(job.index >= tar_begin && job.index < tar_end)) {  // the work source hands out whole tars
      if (tar_begin >= 0 && !pack(tar_begin, tar_end)) break;
      std::tie(tar_begin, tar_end) = tar_images(jobs, job.index, opt.images_per_tar);
    }
    if (done_already(job)) {
      ++summary.skipped;
      progress.image_skipped();
      log.debug("image {} ({}) is complete: skipped", job.index, job.file_stem);
      continue;
    }
    progress.image_started(job.index);
    Stopwatch image_watch;
    StageTimes times;
    ImageRecord record = image_record_of(job);
    if (tars) record.images_per_tar = opt.images_per_tar;
    record.model = provenance.model_name;
    record.model_checksum = provenance.model_checksum;
    record.loras = provenance.denoiser.loras;
    record.scheduler = provenance.denoiser.scheduler;
    record.text_positions = provenance.denoiser.text_positions;
    record.run_id = opt.run_id;
    record.host = opt.host;
    record.rank = opt.rank;
    record.started = utc_iso_now();
    GeneratedImage image;
    try {
      PromptEmbedding prompt = embeddings.get({job.prompt, job.images}, false, times);
      std::optional<PromptEmbedding> negative;
      if (job.true_cfg) negative = embeddings.get({job.negative_prompt, job.images}, job.images.empty(), times);
      // What decides which encoder rows the image saw: on resume, a changed limit matters
      // only to a prompt longer than it. (A family that encodes the whole prompt has none.)
      if (provenance.max_sequence_length > 0) record.max_sequence_length = provenance.max_sequence_length;
      record.prompt_tokens = prompt.available;
      if (negative) record.negative_prompt_tokens = negative->available;
      if (prompt.uncut > prompt.tokens)
        log.warn("image {} ({}): the prompt has {} tokens; the first {} are used (--max-sequence-length{})", job.index,
                 job.origin, prompt.uncut, prompt.tokens,
                 prompt.uncut > prompt.available ? fmt::format("; the tokenizer keeps at most {}", prompt.available) : "");
      log.debug("image {} ({}): denoising, {} steps", job.index, job.file_stem, job.steps);
      image = pipeline.generate(job, prompt, negative ? &*negative : nullptr,
                                [&](int done, int total) {
                                  progress.step(done, total);
                                  if (!stop_requested()) return;
                                  if (opt.on_signal == OnSignal::Abandon || stop_escalated()) throw Abandoned{};
                                  if (!announced_stop) {  // said at the next step, not when the image ends
                                    announced_stop = true;
                                    log.warn("signal {} received: finishing image {} ({} of {} steps left), then "
                                             "stopping; a second signal (a second or more later) abandons it",
                                             stop_signal_number(), job.index, total - done, total);
                                  }
                                },
                                times);
    } catch (const Abandoned&) {
      stop_deadline_met();
      summary.stopped_by_signal = true;
      log.warn("signal {} received: abandoning image {} ({})", stop_signal_number(), job.index, job.file_stem);
      break;
    } catch (const InputError&) {
      throw;  // wrong weights or settings: every image would fail the same way
    } catch (const std::exception& e) {
      image.ok = false;
      image.error = e.what();
    }
    record.timings = {times.text_encoder, times.transformer, times.vae, image_watch.seconds()};
    bool output_broken = false;
    Stopwatch write_watch;
    if (auto failure = image.ok ? writer.write_files(job, image, record) : std::nullopt) {
      image.ok = false;
      image.error = failure->error;
      output_broken = failure->folder_takes_no_more;
    }
    record.timings.write_s = write_watch.seconds();
    record.status = image.ok ? "ok" : "failed";
    record.finished = utc_iso_now(false);
    if (auto failure = image.ok ? writer.write_sample(job, record) : std::nullopt) {
      image.ok = false;
      image.error = failure->error;
      record.status = "failed";
      output_broken = failure->folder_takes_no_more;
    }
    if (image.ok) {
      ++summary.done;
      log.info("image {} done: {} ({:.1f} s: text {:.2f}, transformer {:.2f}, vae {:.2f})", job.index,
               job.file(), image_watch.seconds(), times.text_encoder, times.transformer, times.vae);
    } else {
      record.error = image.error;
      ++summary.failed;
      log.error("image {} ({}) failed: {}; no PNG written", job.index, job.origin, image.error);
    }
    if (tars) on_disk[static_cast<size_t>(job.index)] = image.ok ? kStaged : kNotMade;
    manifest.append(record.to_json());
    progress.image_finished();
    if (output_broken) {
      // A full disk, a quota, a folder gone: every further image would fail the same way, so
      // the allocation is not spent making them. A rerun makes what is missing.
      log.error("stopping: {} cannot be written, so no further image could be saved; fix that and run again",
                opt.out_dir);
      break;
    }
  }
  summary.seconds = run_watch.seconds();
  run_record.mark("ended", {{"done", summary.done},
                            {"skipped", summary.skipped},
                            {"failed", summary.failed},
                            {"stopped_by_signal", summary.stopped_by_signal}});
  return summary;
}

}  // namespace ditbatch
