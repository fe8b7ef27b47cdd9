#include "pipeline/resume.h"

#include <fmt/ranges.h>
#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "io/json_text.h"
#include "io/manifest.h"
#include "io/manifest_fields.h"
#include "pipeline/image_outputs.h"
#include "pipeline/output_layout.h"

namespace ditbatch {

namespace fs = std::filesystem;

namespace {

const nlohmann::json kNoInputImages = nlohmann::json::array();  // what a text-to-image line lists

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

}  // namespace

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

// What one manifest line says of `job`'s image. `other` gets "file (changes)" for OtherSettings;
// `hashed` is set when a file was whole only by its sha256 (its stat had changed).
PreviousImages::State state_of(const std::string& out_dir, const ImageJob& job, const ResumeKey& key,
                               const nlohmann::json& record, OutputTrust trust, std::string* other,
                               bool* hashed = nullptr) {
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
  // An input image that changed since (another file at its path, or the line names another) is
  // the same edit asked of a new input: made again, over the old one.
  const auto recorded_inputs = record.find("input_images");
  const nlohmann::json& then = recorded_inputs != record.end() ? *recorded_inputs : kNoInputImages;
  if (changes.empty() && then != input_images_json(job)) return PreviousImages::Incomplete;
  if (!changes.empty()) {
    if (!listed_file_is_whole(out_dir, record, ListedFile::Image, OutputTrust::Stat)) return PreviousImages::Incomplete;
    if (other) *other = fmt::format("{} ({})", file, fmt::join(changes, "; "));
    return PreviousImages::OtherSettings;
  }
  // --output-type latent: the latents file is part of the image (listed since it was written);
  // in a WebDataset folder its record is (the tar's .json member, or the staged one).
  const bool whole = listed_file_is_whole(out_dir, record, ListedFile::Image, trust, hashed) &&
                     (!key.with_latents || listed_file_is_whole(out_dir, record, ListedFile::Latents, trust, hashed)) &&
                     (key.images_per_tar == 0 || listed_file_is_whole(out_dir, record, ListedFile::Record, trust, hashed));
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
      same_ = lora_set_key(parse_json(then)) == now_;  // as changed_denoiser_settings reads it
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
                                                    LoraVerdicts& loras, bool* hashed) {
  if (f.status != "ok") return PreviousImages::Incomplete;
  bool same = f.prompt == job.prompt && f.negative_prompt == job.negative_prompt_used() && f.seed == job.seed &&
              f.width == job.width && f.height == job.height && f.steps == job.steps && f.cfg == job.cfg_used() &&
              f.model_checksum == key.model_checksum;
  if (same && f.max_sequence_length > 0 && f.max_sequence_length != key.max_sequence_length)
    for (const int64_t tokens : {f.prompt_tokens, f.negative_prompt_tokens})
      if (std::min(tokens, f.max_sequence_length) != std::min(tokens, key.max_sequence_length)) same = false;
  same = same && f.scheduler.value_or(key.denoiser.model_scheduler) == key.denoiser.scheduler && loras.same(f.loras) &&
         f.text_positions == key.denoiser.text_positions;
  // The file: a packed image names its tar and its member, a staged or plain one its path.
  const bool packed = f.member.has_value();
  same = same && (packed ? f.file == job.tar && *f.member == job.file_stem + ".png" : f.file == job.file());
  same = same && (key.images_per_tar == 0 || f.images_per_tar == key.images_per_tar);
  same = same && f.input_images == (job.images.empty() ? std::string() : input_images_json(job).dump());
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
  const bool whole = listed_file_is_whole(out_dir, png, trust, hashed) &&
                     (!key.with_latents || listed_file_is_whole(out_dir, latents, trust, hashed)) &&
                     (key.images_per_tar == 0 || listed_file_is_whole(out_dir, record, trust, hashed));
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
      "prompt_tokens", "negative_prompt_tokens", "loras", "scheduler", "input_images", "text_positions"};
  // Each line read by the quick parser; only where it cannot say, by the full one (the same
  // verdict, and the words of what changed).
  ManifestFieldParser parser;
  ManifestFields fields;
  LoraVerdicts loras(key.denoiser);
  for_each_manifest_text(out_dir, [&](std::string_view text, const ManifestLineAt& where) {
    std::optional<nlohmann::json> record;
    const ManifestFieldParser::Verdict verdict = parser.parse(text, fields);
    const bool not_a_line = verdict == ManifestFieldParser::NotALine ||
                            (verdict == ManifestFieldParser::Unsure && !(record = parse_manifest_line(text, kResumeFields)));
    if (not_a_line) return previous.damage.note(text, where.file, where.line_number);
    const int64_t index = record ? (*record)["index"].get<int64_t>() : fields.index;
    if (index >= std::ssize(jobs) || index < 0) previous.outside_the_list.insert(index);
    if (index < begin || index >= end || index >= std::ssize(jobs)) return;
    const ImageJob& job = jobs[static_cast<size_t>(index)];
    auto state_by = [&](OutputTrust trust, std::string* other, bool* hashed) {
      if (!record)
        if (const auto quick = quick_state_of(out_dir, job, key, fields, trust, loras, hashed)) return *quick;
      if (!record) record = parse_manifest_line(text, kResumeFields);
      return record ? state_of(out_dir, job, key, *record, trust, other, hashed) : PreviousImages::Absent;
    };
    std::string other;
    bool hashed = false;
    auto state = state_by(OutputTrust::Stat, &other, &hashed);
    if (state == PreviousImages::Absent) return;  // (the full parser skips a line the quick one read)
    if ((state == PreviousImages::Complete || state == PreviousImages::Packed) && hashed)
      previous.restat.insert(index);
    else
      previous.restat.erase(index);  // (a later line for the index decides)
    previous.examples.erase(index);
    if (state == PreviousImages::OtherSettings && previous.examples.size() < kExamplesKept)
      previous.examples.emplace(index, std::move(other));
    if (changed_in_place) {
      const bool by_hash = (state == PreviousImages::Complete || state == PreviousImages::Packed) &&
                           state_by(OutputTrust::Hash, nullptr, nullptr) != state;
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

void warn_of_previous_lines(const std::string& out_dir, const PreviousImages& previous, int64_t jobs, const Log& log) {
  if (previous.damage.lines > 0) log.warn("{}", previous.damage.describe(out_dir));
  if (previous.outside_the_list.empty()) return;
  const int64_t low = *previous.outside_the_list.begin(), high = *previous.outside_the_list.rbegin();
  log.warn("{}: {} image(s) listed in its manifest have an index this prompt list of {} has not ({}): another "
           "prompt list's; left as they are and listed, not part of this run",
           out_dir, previous.outside_the_list.size(), jobs,
           low == high ? fmt::format("index {}", low) : fmt::format("indices {} to {}", low, high));
}

void check_previous_images(const std::string& out_dir, const std::vector<ImageJob>& jobs, const ResumeKey& key) {
  check_previous_images(out_dir, scan_previous_images(out_dir, jobs, key));
}

namespace {

// The names a manifest line lists as files of its own in the folder (a tar is shared: not one).
std::vector<std::string> own_files_of(const nlohmann::json& line) {
  std::vector<std::string> files;
  for (const char* key : {"file", "latents_file", "json_file"}) {
    if (std::string_view(key) == "file" && line.contains("member")) continue;
    const auto it = line.find(key);
    if (it != line.end() && it->is_string() && is_output_name(it->get<std::string>())) files.push_back(it->get<std::string>());
  }
  return files;
}

const std::set<std::string> kOwnFileFields = {"file", "latents_file", "json_file", "member"};

}  // namespace

int64_t record_current_stats(const std::string& out_dir, const std::set<int64_t>& restat, const std::string& run_id) {
  if (restat.empty()) return 0;
  std::optional<ManifestPart> part;
  std::vector<nlohmann::json> lines;  // appended a batch at a time: a copied million-image folder is gigabytes of JSON
  int64_t written = 0;
  auto append = [&] {
    if (lines.empty()) return;
    if (!part) part.emplace(out_dir, run_id, 0);
    part->append(lines);
    written += std::ssize(lines);
    lines.clear();
  };
  for_each_last_manifest_line(out_dir, [&](int64_t index, const nlohmann::json& line) {
    if (!restat.count(index)) return;
    lines.push_back(with_current_stats(out_dir, line));
    if (lines.size() == 4096) append();
  });
  append();
  return written;
}

std::vector<std::string> outputs_to_be_replaced(const std::string& out_dir, const std::vector<ImageJob>& jobs,
                                                int64_t begin, int64_t end) {
  std::set<std::string> files;
  end = std::min(end, std::ssize(jobs));
  for_each_last_manifest_line(out_dir, [&](int64_t index, const nlohmann::json& line) {
    if (index < begin || index >= end) return;
    const auto file = line.find("file");
    if (line.contains("member") || file == line.end() || !file->is_string()) return;
    if (*file == jobs[static_cast<size_t>(index)].file()) return;  // the same name: replaced in place
    for (std::string& f : own_files_of(line)) files.insert(std::move(f));
  }, kOwnFileFields);
  return {files.begin(), files.end()};
}

std::vector<std::string> remove_replaced_outputs(const std::string& out_dir, const std::vector<std::string>& files) {
  if (files.empty()) return {};
  std::set<std::string> listed;
  const std::set<std::string> candidates(files.begin(), files.end());
  for_each_last_manifest_line(out_dir, [&](int64_t, const nlohmann::json& line) {
    for (std::string& f : own_files_of(line))
      if (candidates.count(f)) listed.insert(std::move(f));
  }, kOwnFileFields);
  std::vector<std::string> removed;
  for (const std::string& name : files) {
    if (listed.count(name)) continue;
    const std::optional<std::string> path = output_path(out_dir, name);
    std::error_code ec;
    if (path && fs::is_regular_file(fs::symlink_status(*path, ec)) && fs::remove(*path, ec)) removed.push_back(name);
  }
  return removed;
}

}  // namespace ditbatch
