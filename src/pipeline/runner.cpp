#include "pipeline/runner.h"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "core/build_info.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/sha256.h"
#include "core/timer.h"
#include "core/wall_clock.h"
#include "io/h5.h"
#include "io/manifest_fields.h"
#include "io/run_record.h"
#include "pipeline/stop_signal.h"
#include "pipeline/tar_shards.h"

namespace ditbatch {

namespace {

// Thrown from the step callback to abandon the current image on a stop signal.
struct Abandoned {};

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string build_version() { return fmt::format("ditbatch {} ({})", DITBATCH_VERSION, build_commit()); }

void write_latents_file(const std::string& path, const ImageJob& job, const Tensor& latents) {
  TempFile tmp(path, false);  // removed unless committed: a full disk leaves nothing behind
  h5::File f = h5::File::create_exclusive(tmp.path());
  {
    h5::Group root = f.root();
    root.write_tensor("latents", latents.view({1, latents.dim(0), latents.dim(1)}));  // diffusers' [B, S, 64]
    root.set_attr("seed", static_cast<int64_t>(job.seed));
    root.set_attr("height", job.height);
    root.set_attr("width", job.width);
    root.set_attr("steps", job.steps);
  }
  f.close_checked();  // with nothing else open, so that HDF5 writes what it buffers now, and says if it cannot
  tmp.commit();
}

// A manifest field as resume reads it. A line ditbatch did not write (edited by hand, another
// tool's) may hold any JSON there: a field of another type counts as not recorded, so the
// image is made again, as for a torn line, instead of nlohmann's type_error ending the run.
std::string recorded_string(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  return it != record.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t recorded_int(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  return it != record.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

// The stat a rerun compares, taken right after the rename (which leaves size and mtime alone).
FileStat written_file_stat(const std::string& path) {
  const std::optional<FileStat> st = stat_regular_file(path);
  if (!st) fail("{}: is gone right after it was written", path);
  return *st;
}

// --output-format webdataset: the record of a staged image, beside its PNG ("00012/000012345.json"),
// which becomes the sample's .json in its tar: the manifest line less where the PNG lies.
void write_sample_record(const std::string& out_dir, const ImageJob& job, ImageRecord& record) {
  const std::string text = record.sample_text();
  const std::string path = out_dir + "/" + job.file(".json");
  write_file_atomic(path, text);
  record.json_file = job.file(".json");
  record.json_sha256 = sha256_hex(text);
  record.json_file_stat = written_file_stat(path);
}

}  // namespace

OutputProvenance OutputProvenance::from(const WeightStore& weights, const QwenImagePipeline& pipeline) {
  return {weights.model_name(), weights.checksum(), pipeline.max_sequence_length(),
          DenoiserSetup::of(pipeline.loras(), pipeline.scheduler_config(), pipeline.model_scheduler_config())};
}

std::string png_path(const std::string& out_dir, const ImageJob& job) { return out_dir + "/" + job.file(); }

ImageRecord image_record_of(const ImageJob& job) {
  ImageRecord r;
  r.index = job.index;
  r.prompt = job.prompt;
  r.negative_prompt = job.negative_prompt_used();
  r.seed = job.seed;
  r.width = job.width;
  r.height = job.height;
  r.steps = job.steps;
  r.cfg = job.cfg_used();
  r.true_cfg = job.true_cfg;
  r.file = job.file();
  return r;
}

std::vector<std::string> changed_settings(const ImageJob& job, const ResumeKey& key, const nlohmann::json& record) {
  std::vector<std::string> changes;
  auto shown = [](const nlohmann::json& v) {
    if (v.is_number_float()) return fmt::format("{}", v.get<float>());  // cfg: 4.1, not 4.099999904632568
    if (!v.is_string()) return v.dump();
    std::string s = v.get<std::string>();
    if (s.size() > 40) {  // cut where a UTF-8 character starts: dump() throws on a cut one
      size_t cut = 37;
      while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
      s = s.substr(0, cut) + "...";
    }
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  // Compared without building the job's record (a rerun compares a million of them): strings
  // as strings, numbers by value as JSON compares them.
  const std::string& negative = job.negative_prompt_used();
  auto same_string = [](nlohmann::json::const_iterator it, const std::string& now) {
    return it->is_string() && it->get_ref<const std::string&>() == now;
  };
  std::optional<nlohmann::json> now;  // the job's record, for the message only
  for (const char* key : {"prompt", "negative_prompt", "seed", "width", "height", "steps", "cfg"}) {
    const auto it = record.find(key);
    const std::string_view k = key;
    // cfg is written from a float: compare it as one (4.1f comes back as 4.099999904632568).
    const bool same = it != record.end() &&
                      (k == "prompt"            ? same_string(it, job.prompt)
                       : k == "negative_prompt" ? same_string(it, negative)
                       : k == "seed"            ? *it == nlohmann::json(job.seed)
                       : k == "width"           ? *it == nlohmann::json(job.width)
                       : k == "height"          ? *it == nlohmann::json(job.height)
                       : k == "steps"           ? *it == nlohmann::json(job.steps)
                                                : it->is_number() && it->get<float>() == job.cfg_used());
    if (same) continue;
    if (!now) now = image_record_of(job).to_json();
    changes.push_back(fmt::format("{} {}, now {}", key, it == record.end() ? "not recorded" : shown(*it),
                                  shown((*now)[key])));
  }
  const std::string made_with = recorded_string(record, "model_checksum");
  if (made_with != key.model_checksum)
    changes.push_back(fmt::format("model checksum {}, now {}", made_with.empty() ? "not recorded" : made_with.substr(0, 12),
                                  key.model_checksum.substr(0, 12)));
  // The token limit matters only to a prompt longer than it: the encoder rows kept are
  // min(limit, the prompt's rows), recorded with the image.
  const int64_t limit_then = recorded_int(record, "max_sequence_length");
  if (limit_then > 0 && limit_then != key.max_sequence_length)
    for (const char* tokens_key : {"prompt_tokens", "negative_prompt_tokens"}) {
      const int64_t tokens = recorded_int(record, tokens_key);
      if (std::min(tokens, limit_then) != std::min(tokens, key.max_sequence_length)) {
        changes.push_back(fmt::format("max_sequence_length {}, now {} ({} of {} tokens)", limit_then,
                                      key.max_sequence_length, tokens_key, tokens));
        break;
      }
    }
  for (std::string& change : changed_denoiser_settings(key.denoiser, record)) changes.push_back(std::move(change));
  return changes;
}

namespace {

// What one manifest line says of `job`'s image. `other` gets "file (changes)" for OtherSettings.
PreviousImages::State state_of(const std::string& out_dir, const ImageJob& job, const ResumeKey& key,
                               const nlohmann::json& record, OutputTrust trust, std::string* other) {
  if (recorded_string(record, "status") != "ok") return PreviousImages::Incomplete;
  // Settings first (no read), then only a PNG that is still there and whole matters. Another
  // file at this index (a changed prompt list) counts too: the manifest would drop its line.
  auto changes = changed_settings(job, key, record);
  // The file: a packed image names its tar and its member, a staged or plain one its path.
  const bool packed = is_tar_member(record);
  const std::string file = packed ? fmt::format("{}:{}", recorded_string(record, "file"), recorded_string(record, "member"))
                                  : recorded_string(record, "file");
  const bool same_file = packed ? job.tar == recorded_string(record, "file") &&
                                      job.file_stem + ".png" == recorded_string(record, "member")
                                : file == job.file();
  if (!same_file) changes.insert(changes.begin(), fmt::format("now {}", job.file()));
  // Another tar size puts the same names in other tars: each tar's images are another set.
  if (key.images_per_tar > 0 && recorded_int(record, "images_per_tar") != key.images_per_tar)
    changes.push_back(fmt::format("images_per_tar {}, now {}", recorded_int(record, "images_per_tar"), key.images_per_tar));
  if (!changes.empty()) {
    if (!listed_file_is_whole(out_dir, record, ListedFile::Image, OutputTrust::Stat)) return PreviousImages::Incomplete;
    if (other) *other = fmt::format("{} ({})", file, fmt::join(changes, "; "));
    return PreviousImages::OtherSettings;
  }
  // --output-type latent: the latents file is part of the image (listed since it was written);
  // in a WebDataset folder its record is (the tar's .json member, or the staged one).
  const bool whole = listed_file_is_whole(out_dir, record, ListedFile::Image, trust) &&
                     (!key.with_latents || listed_file_is_whole(out_dir, record, ListedFile::Latents, trust)) &&
                     (key.images_per_tar == 0 || listed_file_is_whole(out_dir, record, ListedFile::Record, trust));
  if (!whole) return PreviousImages::Incomplete;
  return packed ? PreviousImages::Packed : PreviousImages::Complete;
}

// Whether a recorded LoRA set (as minified JSON) is the run's, for one text after another:
// the lines of a folder hold the same one, compared once.
class LoraVerdicts {
 public:
  explicit LoraVerdicts(const DenoiserSetup& setup) : now_(lora_set_key(setup.loras)) {}
  bool same(const std::string& then) {
    if (then != then_ || !known_) {
      same_ = lora_set_key(nlohmann::json::parse(then)) == now_;  // as changed_denoiser_settings reads it
      then_ = then;
      known_ = true;
    }
    return same_;
  }

 private:
  std::string now_, then_;
  bool known_ = false, same_ = false;
};

// state_of of a line read by ManifestFieldParser, where it can say without the full parser:
// nullopt where a setting or the file differs, or is of a shape it does not compare (the
// full path finds what changed and words it). Every comparison is changed_settings's.
std::optional<PreviousImages::State> quick_state_of(const std::string& out_dir, const ImageJob& job,
                                                    const ResumeKey& key, const ManifestFields& f, OutputTrust trust,
                                                    LoraVerdicts& loras) {
  if (f.status != "ok") return PreviousImages::Incomplete;
  bool same = f.prompt == job.prompt && f.negative_prompt == job.negative_prompt_used() && f.seed == job.seed &&
              f.width == job.width && f.height == job.height && f.steps == job.steps && f.cfg == job.cfg_used() &&
              f.model_checksum == key.model_checksum;
  if (same && f.max_sequence_length > 0 && f.max_sequence_length != key.max_sequence_length)
    for (const int64_t tokens : {f.prompt_tokens, f.negative_prompt_tokens})
      if (std::min(tokens, f.max_sequence_length) != std::min(tokens, key.max_sequence_length)) same = false;
  same = same && f.scheduler.value_or(key.denoiser.model_scheduler) == key.denoiser.scheduler && loras.same(f.loras);
  // The file: a packed image names its tar and its member, a staged or plain one its path.
  const bool packed = f.member.has_value();
  same = same && (packed ? f.file == job.tar && *f.member == job.file_stem + ".png" : f.file == job.file());
  same = same && (key.images_per_tar == 0 || f.images_per_tar == key.images_per_tar);
  if (!same) return std::nullopt;
  const FileListing png{f.file, f.sha256, f.file_stat}, latents{f.latents_file, f.latents_sha256, f.latents_file_stat},
      record{f.json_file, f.json_sha256, f.json_file_stat};
  if (packed) {  // whole by the tar's stat, or its members are read by the full path
    const bool by_stat = trust == OutputTrust::Stat && !key.with_latents && key.images_per_tar > 0 &&
                         listed_members_are_whole_by_stat(
                             out_dir, f.file, f.file_stat,
                             {{*f.member, f.member_offset, f.member_size},
                              {f.json_member.value_or(""), f.json_member_offset, f.json_member_size}});
    return by_stat ? std::optional(PreviousImages::Packed) : std::nullopt;
  }
  const bool whole = listed_file_is_whole(out_dir, png, trust) &&
                     (!key.with_latents || listed_file_is_whole(out_dir, latents, trust)) &&
                     (key.images_per_tar == 0 || listed_file_is_whole(out_dir, record, trust));
  return whole ? PreviousImages::Complete : PreviousImages::Incomplete;
}

}  // namespace

bool image_is_complete(const std::string& out_dir, const ImageJob& job, const ResumeKey& key,
                       const std::map<int64_t, nlohmann::json>& manifest, OutputTrust trust) {
  const auto it = manifest.find(job.index);
  if (it == manifest.end()) return false;
  const PreviousImages::State state = state_of(out_dir, job, key, it->second, trust, nullptr);
  return state == PreviousImages::Complete || state == PreviousImages::Packed;
}

int64_t PreviousImages::count(State s, int64_t begin, int64_t end) const {
  return std::count(state.begin() + begin, state.begin() + end, static_cast<uint8_t>(s));
}

PreviousImages scan_previous_images(const std::string& out_dir, const std::vector<ImageJob>& jobs,
                                    const ResumeKey& key, int64_t begin, int64_t end,
                                    std::vector<int64_t>* changed_in_place) {
  PreviousImages previous;
  previous.state.assign(jobs.size(), PreviousImages::Absent);
  std::vector<uint8_t> changed(changed_in_place ? jobs.size() : 0);
  constexpr size_t kExamplesKept = 1000;  // the message names three; overridden lines drop theirs
  // What state_of reads (changed_settings, changed_denoiser_settings, listed_file_is_whole).
  static const std::set<std::string> kResumeFields = {
      "status", "file", "sha256", "file_stat", "latents_file", "latents_sha256", "latents_file_stat", "member",
      "member_offset", "member_size", "json_file", "json_sha256", "json_file_stat", "json_member",
      "json_member_offset", "json_member_size", "images_per_tar", "prompt",
      "negative_prompt", "seed", "width", "height", "steps", "cfg", "model_checksum", "max_sequence_length",
      "prompt_tokens", "negative_prompt_tokens", "loras", "scheduler"};
  // Each line read by the quick parser; only where it cannot say, by the full one (the same
  // verdict, and the words of what changed).
  ManifestFieldParser parser;
  ManifestFields fields;
  LoraVerdicts loras(key.denoiser);
  for_each_manifest_text(out_dir, [&](std::string_view text) {
    std::optional<nlohmann::json> record;
    const ManifestFieldParser::Verdict verdict = parser.parse(text, fields);
    if (verdict == ManifestFieldParser::NotALine) return;
    if (verdict == ManifestFieldParser::Unsure && !(record = parse_manifest_line(text, kResumeFields))) return;
    const int64_t index = record ? (*record)["index"].get<int64_t>() : fields.index;
    if (index < begin || index >= end || index >= std::ssize(jobs)) return;
    const ImageJob& job = jobs[static_cast<size_t>(index)];
    auto state_by = [&](OutputTrust trust, std::string* other) {
      if (!record)
        if (const auto quick = quick_state_of(out_dir, job, key, fields, trust, loras)) return *quick;
      if (!record) record = parse_manifest_line(text, kResumeFields);
      return record ? state_of(out_dir, job, key, *record, trust, other) : PreviousImages::Absent;
    };
    std::string other;
    auto state = state_by(OutputTrust::Stat, &other);
    if (state == PreviousImages::Absent) return;  // (the full parser skips a line the quick one read)
    previous.examples.erase(index);
    if (state == PreviousImages::OtherSettings && previous.examples.size() < kExamplesKept)
      previous.examples.emplace(index, std::move(other));
    if (changed_in_place) {
      const bool by_hash = (state == PreviousImages::Complete || state == PreviousImages::Packed) &&
                           state_by(OutputTrust::Hash, nullptr) != state;
      changed[static_cast<size_t>(index)] = by_hash;
      if (by_hash) state = PreviousImages::Incomplete;
    }
    previous.state[static_cast<size_t>(index)] = state;
  });
  if (changed_in_place)
    for (size_t i = 0; i < changed.size(); ++i)
      if (changed[i]) changed_in_place->push_back(static_cast<int64_t>(i));
  return previous;
}

PreviousImages scan_previous_images(const std::string& out_dir, const std::vector<ImageJob>& jobs,
                                    const ResumeKey& key) {
  return scan_previous_images(out_dir, jobs, key, 0, std::ssize(jobs), nullptr);
}

std::vector<int64_t> outputs_changed_in_place(const std::string& out_dir, const std::vector<ImageJob>& jobs,
                                              int64_t begin, int64_t end, const ResumeKey& key, const Log& log) {
  std::vector<int64_t> changed;
  scan_previous_images(out_dir, jobs, key, begin, end, &changed);
  for (const int64_t i : changed)
    log.warn("{}/{}: its bytes differ from the sha256 the manifest lists, though its size and mtime do not: made "
             "again",
             out_dir, jobs[static_cast<size_t>(i)].file());
  return changed;
}

void check_previous_images(const std::string& out_dir, const PreviousImages& previous) {
  const int64_t count = previous.count(PreviousImages::OtherSettings, 0, std::ssize(previous.state));
  std::vector<std::string> found;
  for (auto it = previous.examples.begin(); it != previous.examples.end() && found.size() < 3; ++it)
    found.push_back(it->second);
  if (count > 0)
    fail_input("--out {}: {} image(s) there were made with other settings than this run asks for: {}{}. Give "
               "another --out (in a job script: DITBATCH_OUT), or --overwrite to make them again with these settings "
               "(not in a job that requeues: it would start over at each requeue)",
               out_dir, count, fmt::join(found, ", "), count > 3 ? fmt::format(" and {} more", count - 3) : "");
}

void check_previous_images(const std::string& out_dir, const std::vector<ImageJob>& jobs, const ResumeKey& key) {
  check_previous_images(out_dir, scan_previous_images(out_dir, jobs, key));
}

PngText png_metadata(const ImageRecord& r) {
  DITBATCH_CHECK(r.max_sequence_length.has_value(), "image {}: a PNG is written once its prompt is encoded", r.index);
  const float cfg = static_cast<float>(r.cfg);  // as the job held it: 4.1, not 4.099999904632568
  std::string parameters = r.prompt + a1111_lora_tags(r.loras) + "\n";
  if (r.true_cfg) parameters += "Negative prompt: " + r.negative_prompt + "\n";
  parameters += fmt::format("Steps: {}, Sampler: FlowMatchEulerDiscrete, CFG scale: {}, Seed: {}, Size: {}x{}, "
                            "Model hash: {}, Model: {}{}, Version: {}",
                            r.steps, cfg, r.seed, r.width, r.height, r.model_checksum.substr(0, 10), r.model,
                            a1111_lora_hashes(r.loras), build_version());
  return {{"parameters", parameters},
          {"prompt", r.prompt},
          {"negative_prompt", r.negative_prompt},
          {"seed", std::to_string(r.seed)},
          {"steps", std::to_string(r.steps)},
          {"cfg", fmt::format("{}", cfg)},
          {"size", fmt::format("{}x{}", r.width, r.height)},
          {"scheduler", r.scheduler},
          {"loras", r.loras.dump()},
          {"model", r.model},
          {"model_checksum", r.model_checksum},
          {"max_sequence_length", std::to_string(*r.max_sequence_length)},
          {"software", build_version()}};
}

namespace {

// Prompt embeddings for the images of one run. With --offload-text-encoder every prompt this
// process will make is encoded up front and kept on the host; the encoder is then freed
// before the denoiser loads. Negative prompts (usually the one " ") are encoded once.
class EmbeddingCache {
 public:
  explicit EmbeddingCache(QwenImagePipeline& pipeline) : pipeline_(pipeline) {}

  void preencode(const std::vector<std::string>& texts, const Log& log) {
    Stopwatch watch;
    StageTimes ignored;
    for (const auto& t : texts)
      if (!host_.count(t)) {
        PromptEmbedding e = pipeline_.encode_prompt(t, &ignored);
        e.embeds = pipeline_.backend().to_host_f32(e.embeds);
        host_[t] = std::move(e);
      }
    log.info("encoded {} prompts in {:.1f} s; releasing the text encoder", host_.size(), watch.seconds());
    pipeline_.release_text_encoder();
  }

  PromptEmbedding get(const std::string& text, bool reuse, StageTimes& times) {
    if (auto it = reused_.find(text); it != reused_.end()) return it->second;
    PromptEmbedding e;
    if (auto it = host_.find(text); it != host_.end()) {
      e = it->second;
      e.embeds = pipeline_.backend().upload(it->second.embeds, DType::F32);
    } else {
      e = pipeline_.encode_prompt(text, &times);
    }
    if (reuse) reused_[text] = e;
    return e;
  }

 private:
  QwenImagePipeline& pipeline_;
  std::map<std::string, PromptEmbedding> host_;  // embeds on the host
  std::map<std::string, PromptEmbedding> reused_;
};

}  // namespace

RunSummary run_generation(QwenImagePipeline& pipeline, const std::vector<ImageJob>& jobs, WorkSource& work,
                          const RunOptions& opt, const OutputProvenance& provenance, Progress& progress,
                          const Log& log) {
  Stopwatch run_watch;
  RunSummary summary;
  ManifestPart manifest(opt.out_dir, opt.run_id, opt.rank);
  RunRecordWriter run_record(opt.out_dir,
                             {{"run_id", opt.run_id}, {"rank", opt.rank}, {"host", opt.host},
                              {"backend", pipeline.backend().name()}, {"version", build_version()},
                              {"model", provenance.model_name}, {"model_checksum", provenance.model_checksum},
                              {"images", jobs.size()}},
                             log);
  const ResumeKey key{provenance.model_checksum, provenance.max_sequence_length, opt.write_latents, provenance.denoiser,
                      opt.images_per_tar};
  const std::vector<uint8_t> complete =
      opt.overwrite ? std::vector<uint8_t>(jobs.size(), 0)
                    : (opt.complete ? *opt.complete : scan_previous_images(opt.out_dir, jobs, key).complete_flags());
  auto done_already = [&](const ImageJob& job) {
    return !opt.remake.count(job.index) && complete[static_cast<size_t>(job.index)] != 0;
  };

  // Load everything before the first image, on every process: loading is collective under MPI.
  EmbeddingCache embeddings(pipeline);
  pipeline.load_text_encoder();
  if (opt.offload_text_encoder) {
    auto planned = work.planned();
    DITBATCH_CHECK(planned.has_value(), "--offload-text-encoder needs a work source that knows its images up front");
    std::vector<std::string> texts;
    for (int64_t i : *planned) {
      const ImageJob& job = jobs[static_cast<size_t>(i)];
      if (done_already(job)) continue;
      texts.push_back(job.prompt);
      if (job.true_cfg) texts.push_back(job.negative_prompt);
    }
    embeddings.preencode(texts, log);
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
  std::set<std::string> folders_made;  // the sharded layout's subfolders this process has checked
  // --output-format webdataset: what the folder holds of each image, and the tar being made.
  std::vector<uint8_t> on_disk;
  if (tars) {
    on_disk = complete;
    for (const int64_t i : opt.remake) on_disk[static_cast<size_t>(i)] = kNotMade;
  }
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
    record.run_id = opt.run_id;
    record.host = opt.host;
    record.rank = opt.rank;
    record.started = utc_iso_now();
    GeneratedImage image;
    try {
      PromptEmbedding prompt = embeddings.get(job.prompt, false, times);
      std::optional<PromptEmbedding> negative;
      if (job.true_cfg) negative = embeddings.get(job.negative_prompt, true, times);
      // What decides which encoder rows the image saw: on resume, a changed limit matters
      // only to a prompt longer than it.
      record.max_sequence_length = provenance.max_sequence_length;
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
    if (image.ok) {
      const std::string png = png_path(opt.out_dir, job);
      bool png_written = false;
      try {
        if (!job.folder.empty() && folders_made.insert(job.folder).second) make_output_folder(opt.out_dir, job.folder);
        const std::string bytes =
            write_png_atomic(png, image.rgb.data(), job.width, job.height, png_metadata(record));
        png_written = true;
        record.file_stat = written_file_stat(png);
        if (opt.write_latents) {
          const std::string latents = job.file(".latents.h5");
          write_latents_file(opt.out_dir + "/" + latents, job, image.latents);
          record.latents_file = latents;
          record.latents_sha256 = sha256_file(opt.out_dir + "/" + latents);
          record.latents_file_stat = written_file_stat(opt.out_dir + "/" + latents);
        }
        record.sha256 = sha256_hex(bytes);
      } catch (const std::exception& e) {
        // With --output-type latent an image is its PNG and its latents file: the PNG goes too,
        // so that a failed image leaves no file behind (a rerun makes both).
        if (png_written) std::remove(png.c_str());
        image.ok = false;
        image.error = fmt::format("cannot write the output: {}", e.what());
        output_broken = true;
      }
    }
    record.timings.write_s = write_watch.seconds();
    record.status = image.ok ? "ok" : "failed";
    record.finished = utc_now();
    if (image.ok && tars) try {
        write_sample_record(opt.out_dir, job, record);
      } catch (const std::exception& e) {
        std::remove(png_path(opt.out_dir, job).c_str());  // an image is its PNG and its record
        image.ok = false;
        image.error = fmt::format("cannot write the output: {}", e.what());
        record.status = "failed";
        output_broken = true;
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
