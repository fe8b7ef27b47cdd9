#include "pipeline/job.h"

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "core/error.h"

namespace ditbatch {

std::string slugify(const std::string& text) {
  std::string slug;
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) && c < 0x80) {
      slug += static_cast<char>(std::tolower(c));
    } else if (!slug.empty() && slug.back() != '-') {
      slug += '-';
    }
    if (slug.size() >= 48) break;
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug.empty() ? "image" : slug;
}

namespace {

int64_t resolve_side(int64_t value, const char* what, const std::string& origin, const GenerationDefaults& d,
                     const Log& log) {
  const int64_t least = std::max(kMinImageSide, d.size_multiple);
  if (value < least || value > kMaxImageSide)
    fail_input("{}: {} {} is out of range ({}..{} pixels{})", origin, what, value, least, kMaxImageSide,
               least > kMinImageSide ? fmt::format(" for {}", d.model) : "");
  if (value % d.size_multiple != 0) {
    const int64_t floored = value / d.size_multiple * d.size_multiple;
    log.warn("{}: {} {} is not a multiple of {}; using {} (as diffusers does{})", origin, what, value, d.size_multiple,
             floored, d.model.empty() ? "" : " for " + d.model);
    return floored;
  }
  return value;
}

int64_t check_steps(int64_t steps, const std::string& origin, const GenerationDefaults& d) {
  if (d.fixed_steps > 0 && steps != d.fixed_steps)
    fail_input("{}: steps {}, but this {} checkpoint denoises over its own {} sample_sigmas (its model_index.json); "
               "leave steps out",
               origin, steps, d.model, d.fixed_steps);
  if (steps < kMinSteps || steps > kMaxSteps)
    fail_input("{}: steps {} is out of range ({}..{}; one step makes diffusers' shift_terminal schedule divide 0 "
               "by 0)",
               origin, steps, kMinSteps, kMaxSteps);
  return steps;
}

double check_cfg(double cfg, const std::string& origin) {
  if (!(cfg >= 1.0) || !std::isfinite(cfg) || cfg > 100.0)
    fail_input("{}: cfg {} is out of range (1..100; 1 turns true CFG off)", origin, cfg);
  return cfg;
}

// Why `text` may not be a prompt (prompt_like) or an image name, or "": invalid UTF-8, a
// control character (a NUL cut the PNG's text chunks: the parameters chunk lost steps, seed
// and model hash; the others are invisible or move the cursor), and in a name a bidirectional
// formatting character too (U+202E shows "x\u202Egnp.exe" as "xexe.png"). Prompts may hold tab,
// and newline where the format allows one (a jsonl string).
std::string forbidden_text(const std::string& text, bool prompt_like) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(text.size());
  while (left > 0) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &c);
    const size_t at = text.size() - static_cast<size_t>(left);
    if (n <= 0 || c < 0) return fmt::format("is not valid UTF-8 (at byte {})", at);
    const bool control = c < 0x20 || (c >= 0x7F && c <= 0x9F);
    const bool bidi = c == 0x061C || c == 0x200E || c == 0x200F || (c >= 0x202A && c <= 0x202E) ||
                      (c >= 0x2066 && c <= 0x2069);
    if ((control && !(prompt_like && (c == '\t' || c == '\n'))) || (bidi && !prompt_like))
      return fmt::format("holds U+{:04X} ({}) at byte {}", c, control ? "a control character" : "a bidirectional "
                                                                                               "formatting character",
                         at);
    p += n;
    left -= n;
  }
  return "";
}

void check_prompt_text(const std::string& text, const char* field, const std::string& origin) {
  if (const std::string why = forbidden_text(text, true); !why.empty())
    fail_input("{}: \"{}\" {}; a prompt may hold tab and newline, no other control character", origin, field, why);
}

bool valid_file_name(const std::string& name) {
  if (name.empty() || name.size() > 200 || name == "." || name == ".." || name[0] == '.') return false;
  for (char c : name)
    if (c == '/' || c == '\\' || c == '\0' || static_cast<unsigned char>(c) < 0x20) return false;
  return true;
}

}  // namespace

std::vector<ImageJob> resolve_jobs(const std::vector<PromptEntry>& entries, const GenerationDefaults& d,
                                   const Log& log, const OutputLayout& layout) {
  // The command line's values are checked (and floored) once, under their option's name:
  // one warning, not one per prompt line that did not set them.
  // 0: the side is left to the input images (an edit model), which the check of the images sets.
  const int64_t width = d.size_from_input_images && d.width == 0 ? 0 : resolve_side(d.width, "width", "--width", d, log);
  const int64_t height =
      d.size_from_input_images && d.height == 0 ? 0 : resolve_side(d.height, "height", "--height", d, log);
  const int64_t steps = check_steps(d.steps, "--steps", d);
  const double cfg = check_cfg(d.cfg, "--cfg");
  check_prompt_text(d.negative_prompt, "negative_prompt", "--negative-prompt");
  std::vector<ImageJob> jobs;
  std::unordered_map<std::string, std::string> stems;  // file stem -> origin, to refuse two images in one file
  bool warned_name = false;
  stems.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const PromptEntry& e = entries[i];
    ImageJob j;
    j.index = static_cast<int64_t>(i);
    j.origin = e.origin;
    check_prompt_text(e.prompt, "prompt", e.origin);
    if (e.negative_prompt) check_prompt_text(*e.negative_prompt, "negative_prompt", e.origin);
    j.prompt = e.prompt;
    j.negative_prompt = e.negative_prompt.value_or(d.negative_prompt);
    if (!e.seed && d.seed > std::numeric_limits<uint64_t>::max() - i)
      fail_input("{}: --seed {} + index {} is past the largest seed (2^64 - 1); give a smaller --seed", e.origin, d.seed,
                 i);
    j.seed = e.seed ? *e.seed : d.seed + static_cast<uint64_t>(i);
    j.width = e.width ? resolve_side(*e.width, "width", e.origin, d, log) : width;
    j.height = e.height ? resolve_side(*e.height, "height", e.origin, d, log) : height;
    j.steps = e.steps ? check_steps(*e.steps, e.origin, d) : steps;
    j.cfg = static_cast<float>(e.cfg ? check_cfg(*e.cfg, e.origin) : cfg);
    // diffusers: do_true_cfg = true_cfg_scale > 1 and negative_prompt is not None ("" included).
    j.true_cfg = j.cfg > 1.0f && !e.no_negative_prompt;
    if (e.no_negative_prompt) j.negative_prompt.clear();
    if (layout.tars()) {
      // A sample's key is its index: WebDataset splits a member name at its first dot, and
      // a "name" may hold dots (or collide with another's key).
      j.file_stem = fmt::format("{:09d}", i);
      if (e.name && !warned_name) {
        warned_name = true;
        log.warn("{}: \"name\" is not used by --output-format webdataset: each sample is keyed by its index "
                 "({}.png, {}.json); the prompt line's fields are in its .json",
                 e.origin, j.file_stem, j.file_stem);
      }
    } else if (e.name) {
      std::string name = *e.name;
      if (const std::string why = forbidden_text(name, false); !why.empty())
        fail_input("{}: \"name\" {}; a file name may hold no control or bidirectional formatting character", e.origin,
                   why);
      if (name.ends_with(".png")) name.resize(name.size() - 4);
      if (!valid_file_name(name))
        fail_input("{}: \"name\" \"{}\" is not a plain file name (no '/', no leading '.', at most 200 bytes)",
                   e.origin, *e.name);
      j.file_stem = name;
    } else {
      j.file_stem = layout.kind == OutputLayout::Kind::Sharded ? fmt::format("{:09d}-{}", i, slugify(e.prompt))
                                                               : fmt::format("{:06d}-{}", i, slugify(e.prompt));
    }
    for (size_t k = 0; k < e.images.size(); ++k) j.images.push_back({e.images[k], e.image_files[k]});
    j.folder = layout.folder_of(j.index);
    j.tar = layout.tar_of(j.index);
    auto [it, inserted] = stems.emplace(j.file_stem, e.origin);
    if (!inserted)
      fail_input("{}: name \"{}\" is already used by {}; each image needs its own file", e.origin, j.file_stem,
                 it->second);
    jobs.push_back(std::move(j));
  }
  return jobs;
}

std::string jobs_to_json(const std::vector<ImageJob>& jobs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& j : jobs)
    out.push_back({{"index", j.index}, {"prompt", j.prompt}, {"negative_prompt", j.negative_prompt},
                   {"seed", j.seed}, {"width", j.width}, {"height", j.height}, {"steps", j.steps},
                   {"cfg", j.cfg}, {"true_cfg", j.true_cfg}, {"file_stem", j.file_stem}, {"folder", j.folder}, {"tar", j.tar},
                   {"origin", j.origin}});
  for (size_t i = 0; i < jobs.size(); ++i)
    for (const InputImage& image : jobs[i].images)
      out[i]["images"].push_back({{"path", image.path}, {"file", image.file}, {"sha256", image.sha256},
                                  {"width", image.width}, {"height", image.height}});
  return out.dump();
}

std::vector<ImageJob> jobs_from_json(const std::string& json) {
  std::vector<ImageJob> jobs;
  for (const auto& o : nlohmann::json::parse(json)) {
    ImageJob j;
    j.index = o["index"];
    j.prompt = o["prompt"];
    j.negative_prompt = o["negative_prompt"];
    j.seed = o["seed"];
    j.width = o["width"];
    j.height = o["height"];
    j.steps = o["steps"];
    j.cfg = o["cfg"];
    j.true_cfg = o["true_cfg"];
    j.file_stem = o["file_stem"];
    j.folder = o["folder"];
    j.tar = o["tar"];
    j.origin = o["origin"];
    if (o.contains("images"))
      for (const auto& image : o["images"])
        j.images.push_back({image["path"], image["file"], image["sha256"], image["width"], image["height"]});
    jobs.push_back(std::move(j));
  }
  return jobs;
}

}  // namespace ditbatch
