#include "model/lora.h"

#include <fmt/ranges.h>
#include <re2/re2.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/fs.h"
#include "core/sha256.h"
#include "io/json_text.h"
#include "io/safetensors.h"

namespace ditbatch {

LoraRequest parse_lora_argument(const std::string& text) {
  LoraRequest r;
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || file_exists(text)) {
    r.path = text;
  } else {
    r.path = text.substr(0, colon);
    const std::string value = text.substr(colon + 1);
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), r.strength);
    if (value.empty() || error != std::errc() || end != value.data() + value.size() || !std::isfinite(r.strength))
      fail_input("--lora {}: strength '{}' is not a number (expected FILE[:STRENGTH], e.g. style.safetensors:0.8)",
                 text, value);
  }
  if (r.path.empty()) fail_input("--lora {}: no file name (expected FILE[:STRENGTH])", text);
  return r;
}

namespace {

enum class Factor { Down, Up, Alpha };

// What a key of a LoRA file means: a factor of a transformer module, in diffusers' names.
struct KeyMeaning {
  std::string module;  // empty: a key of a format ditbatch reads, for a module outside transformer_blocks
  Factor factor;
  std::string format;
};

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

// diffusers' convert_key for Kohya names (the lora_unet_ prefix removed): the top-level modules by
// name, then "transformer_blocks_0_attn_to_q.lora_down.weight" -> "transformer_blocks.0.attn.to_q.
// lora_down.weight", keeping the underscores of the module names that have them. "" for a name
// outside transformer_blocks (diffusers garbles those into no module of the model).
std::string kohya_to_diffusers(const std::string& key) {
  static const std::vector<std::pair<std::string, std::string>> top_level = {
      {"img_in", "img_in"},
      {"txt_in", "txt_in"},
      {"proj_out", "proj_out"},
      {"norm_out_linear", "norm_out.linear"},
      {"time_text_embed_timestep_embedder_linear_1", "time_text_embed.timestep_embedder.linear_1"},
      {"time_text_embed_timestep_embedder_linear_2", "time_text_embed.timestep_embedder.linear_2"},
  };
  for (const auto& [flat, dotted] : top_level)
    if (key == flat || key.starts_with(flat + ".")) return dotted + key.substr(flat.size());
  const std::string prefix = "transformer_blocks_";
  if (!key.starts_with(prefix)) return "";
  std::string base = key, suffix;
  if (const size_t dot = key.rfind('.'); dot != std::string::npos) {
    base = key.substr(0, dot);
    suffix = key.substr(dot + 1);
  }
  const std::string rest = base.substr(prefix.size());
  std::string head = rest, tail;
  if (const size_t dot = rest.find('.'); dot != std::string::npos) {
    head = rest.substr(0, dot);
    tail = rest.substr(dot);
  }
  static const std::set<std::vector<std::string>> protected_ngrams = {
      {"to", "q"},  {"to", "k"},  {"to", "v"},  {"to", "out"},  {"add", "q"},  {"add", "k"},  {"add", "v"},
      {"txt", "mlp"}, {"img", "mlp"}, {"txt", "mod"}, {"img", "mod"},
      {"add", "q", "proj"}, {"add", "k", "proj"}, {"add", "v", "proj"}, {"to", "add", "out"}};
  std::vector<std::string> parts, merged;
  for (size_t start = 0;;) {
    const size_t under = head.find('_', start);
    parts.push_back(head.substr(start, under == std::string::npos ? std::string::npos : under - start));
    if (under == std::string::npos) break;
    start = under + 1;
  }
  for (size_t i = 0; i < parts.size();) {
    size_t taken = 1;
    for (size_t n : {3, 2})  // the longest protected n-gram first
      if (i + n <= parts.size() &&
          protected_ngrams.count(std::vector<std::string>(parts.begin() + static_cast<std::ptrdiff_t>(i),
                                                          parts.begin() + static_cast<std::ptrdiff_t>(i + n)))) {
        taken = n;
        break;
      }
    std::string word = parts[i];
    for (size_t j = 1; j < taken; ++j) word += "_" + parts[i + j];
    merged.push_back(word);
    i += taken;
  }
  return "transformer_blocks." + fmt::format("{}", fmt::join(merged, ".")) + tail + (suffix.empty() ? "" : "." + suffix);
}

// The prefixes removed in diffusers' order (diffusion_model., then lora_unet_ with the Kohya names,
// and ours: transformer., the prefix diffusers' own loader filters by), PEFT's adapter infix
// "default." dropped, then the factor suffix. nullopt: not a LoRA key of any format.
std::optional<KeyMeaning> parse_key(const std::string& key) {
  std::string k = key, prefix = "no prefix";
  if (k.starts_with("diffusion_model.")) {
    k = k.substr(16);
    prefix = "diffusion_model.";
  }
  bool known_module = true;
  if (k.starts_with("lora_unet_")) {
    prefix = "lora_unet_ (Kohya)";
    const std::string converted = kohya_to_diffusers(k.substr(10));
    known_module = !converted.empty();
    k = known_module ? converted : k.substr(10);
  } else if (k.starts_with("transformer.")) {
    k = k.substr(12);
    prefix = "transformer.";
  }
  replace_all(k, "default.", "");
  static const std::vector<std::tuple<std::string, Factor, std::string>> suffixes = {
      {".lora_A.weight", Factor::Down, "lora_A/lora_B"}, {".lora_B.weight", Factor::Up, "lora_A/lora_B"},
      {".lora_down.weight", Factor::Down, "lora_down/lora_up"}, {".lora_up.weight", Factor::Up, "lora_down/lora_up"},
      {".alpha", Factor::Alpha, ""}};
  for (const auto& [suffix, factor, naming] : suffixes)
    if (k.ends_with(suffix) && k.size() > suffix.size())
      return KeyMeaning{known_module ? k.substr(0, k.size() - suffix.size()) : "", factor,
                        naming.empty() ? "" : prefix + " " + naming};
  return std::nullopt;
}

// The LoraConfig diffusers saves in the safetensors metadata ("lora_adapter_metadata", keys
// prefixed "transformer."), as PEFT applies it to one module.
struct MetadataConfig {
  bool present = false;
  int64_t r = 8;          // LoraConfig's defaults
  double lora_alpha = 8;
  bool use_rslora = false;
  nlohmann::ordered_json rank_pattern = nlohmann::ordered_json::object(), alpha_pattern = nlohmann::ordered_json::object();
  nlohmann::ordered_json target_modules;  // null: every module of the file
};

MetadataConfig read_metadata(const std::string& path, const nlohmann::json& metadata) {
  MetadataConfig m;
  if (!metadata.is_object() || !metadata.contains("lora_adapter_metadata") || !metadata["lora_adapter_metadata"].is_string())
    return m;
  nlohmann::ordered_json all;
  try {
    all = parse_json<nlohmann::ordered_json>(metadata["lora_adapter_metadata"].get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: metadata 'lora_adapter_metadata' is not valid JSON: {}", path, e.what());
  }
  if (!all.is_object()) fail_input("{}: metadata 'lora_adapter_metadata' is not a JSON object", path);
  nlohmann::ordered_json c = nlohmann::ordered_json::object();
  for (auto it = all.begin(); it != all.end(); ++it)
    if (it.key().starts_with("transformer.")) c[it.key().substr(12)] = it.value();
  if (c.empty()) return m;
  m.present = true;
  auto number = [&](const char* key, double fallback) {
    if (!c.contains(key) || c[key].is_null()) return fallback;
    if (!c[key].is_number() || !std::isfinite(c[key].get<double>()))
      fail_input("{}: the LoraConfig in its metadata has {} = {} (expected a number)", path, key, json_excerpt(c[key]));
    return c[key].get<double>();
  };
  for (const char* key : {"use_dora", "lora_bias"})
    if (c.contains(key) && c[key].is_boolean() && c[key].get<bool>())
      fail_input("{}: the LoraConfig in its metadata has {} = true, which ditbatch does not implement", path, key);
  const double r = number("r", 8);
  if (r < 1 || r > 65536 || r != std::floor(r))  // 1e300 once read as -9.22e18, 3.5 as 3
    fail_input("{}: the LoraConfig in its metadata has r = {} (expected the rank: a whole number, 1..65536)", path,
               json_excerpt(c["r"]));
  m.r = static_cast<int64_t>(r);
  m.lora_alpha = number("lora_alpha", 8);
  m.use_rslora = c.contains("use_rslora") && c["use_rslora"].is_boolean() && c["use_rslora"].get<bool>();
  for (auto [key, pattern] : {std::pair{"rank_pattern", &m.rank_pattern}, std::pair{"alpha_pattern", &m.alpha_pattern}})
    if (c.contains(key) && c[key].is_object()) *pattern = c[key];
  if (c.contains("target_modules")) m.target_modules = c["target_modules"];
  return m;
}

// A LoraConfig's regular expression, compiled once per text for the whole load. RE2 matches in
// time linear in the module name whatever the pattern (std::regex backtracked: `(a+)+$` took
// forever on a module name, and a 30,000-deep group overflowed the stack); RE2 refuses what it
// cannot bound (nesting deeper than 1000, backreferences, lookaround) and patterns past 1 KB are
// refused before it sees them. PEFT's own patterns are plain module names and alternations.
// `key` is the pattern as the file writes it (`pattern` may wrap it), for the error.
const RE2& lora_regex(const std::string& path, const std::string& field, const std::string& key,
                      const std::string& pattern) {
  static std::mutex lock;
  static std::map<std::string, std::unique_ptr<RE2>> compiled;
  const std::lock_guard<std::mutex> guard(lock);
  auto& re = compiled[pattern];
  if (!re) {
    if (key.size() > 1024)
      fail_input("{}: the LoraConfig in its metadata has {} '{}': a pattern of {} bytes (at most 1024)", path, field,
                 text_excerpt(key, 60), key.size());
    RE2::Options options;
    options.set_log_errors(false);
    options.set_max_mem(int64_t{8} << 20);
    auto candidate = std::make_unique<RE2>(pattern, options);
    if (!candidate->ok())
      fail_input("{}: the LoraConfig in its metadata has {} '{}', which is not a regular expression ditbatch can "
                 "match ({})", path, field, text_excerpt(key, 60), candidate->error());
    re = std::move(candidate);
  }
  return *re;
}

// PEFT's get_pattern_key: the first pattern key that matches the module name as a suffix regex.
const nlohmann::ordered_json* pattern_value(const std::string& path, const char* field,
                                            const nlohmann::ordered_json& patterns, const std::string& module) {
  for (auto it = patterns.begin(); it != patterns.end(); ++it)
    if (RE2::FullMatch(module, lora_regex(path, field, it.key(), "(.*\\.)?(" + it.key() + ")$"))) return &it.value();
  return nullptr;
}

// PEFT's check_target_module_exists for the file's own target_modules.
bool is_target(const std::string& path, const nlohmann::ordered_json& targets, const std::string& module) {
  if (targets.is_null()) return true;
  if (targets.is_string()) {
    const std::string t = targets.get<std::string>();
    if (t == "all-linear") return true;
    return RE2::FullMatch(module, lora_regex(path, "target_modules", t, t));
  }
  if (targets.is_array())
    for (const auto& t : targets)
      if (t.is_string() && (module == t.get<std::string>() || module.ends_with("." + t.get<std::string>()))) return true;
  return false;
}

// Every value finite, or an error naming the tensor and the first bad element.
void check_finite(const std::string& path, const std::string& key, const Tensor& t) {
  const float* v = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(v[i]))
      fail_input("{}: tensor '{}' holds {} at element {} of {} (a broken or overflowed LoRA)", path, key,
                 std::isnan(v[i]) ? "NaN" : "Inf", i, t.numel());
}

// Why a module name is not one of the model's, for the error.
std::string missing_module_reason(const std::string& module, int64_t num_layers, const std::vector<std::string>& linears) {
  static const std::regex block(R"(transformer_blocks\.(\d+)\..*)");
  std::smatch m;
  if (std::regex_match(module, m, block) && std::stoll(m[1].str()) >= num_layers)
    return fmt::format("this transformer has {} blocks, 0..{}", num_layers, num_layers - 1);
  const auto close = closest_names(module, linears);
  return close.empty() ? "no such linear" : fmt::format("closest linears: {}", fmt::join(close, ", "));
}

// The entries of one file for one module.
struct ModuleKeys {
  const SafetensorsEntry* down = nullptr;
  const SafetensorsEntry* up = nullptr;
  const SafetensorsEntry* alpha = nullptr;
};

}  // namespace

LoraSet LoraSet::open(const std::vector<LoraRequest>& requests, const LoraTargets& targets) {
  std::map<std::string, Shape> linears;  // module -> weight [out, in]
  std::vector<std::string> linear_names;
  for (const WeightSpec& spec : targets.weights)
    if (spec.shape.size() == 2 && spec.name.ends_with(".weight")) {
      linears[spec.name.substr(0, spec.name.size() - 7)] = spec.shape;
      linear_names.push_back(spec.name.substr(0, spec.name.size() - 7));
    }
  LoraSet set;
  struct Pending {
    std::string module;
    LoraPatch patch;
  };
  std::vector<std::vector<Pending>> per_file;
  for (const LoraRequest& request : requests) {
    const std::string& path = request.path;
    if (!std::filesystem::is_regular_file(path)) {
      struct stat st {};
      if (::stat(path.c_str(), &st) != 0) fail_input("--lora {}: no such file", path);
      fail_input("--lora {}: is {}, not a file", path, describe_file_type(st.st_mode));
    }
    std::shared_ptr<SafetensorsFile> file;
    try {
      file = SafetensorsFile::open(path);
    } catch (const InputError& e) {
      fail_input("--lora {} is not a readable safetensors file: {}", path, e.what());
    }
    if (file->entries().empty()) fail_input("{}: holds no tensors: not a LoRA", path);
    const size_t index = set.files_.size();
    LoraFile info;
    info.path = path;
    info.name = std::filesystem::path(path).filename().string();
    info.strength = request.strength;
    const MetadataConfig meta = read_metadata(path, file->metadata());

    // Keys -> modules, every key accounted for.
    std::map<std::string, ModuleKeys> modules;
    std::vector<std::string> unmatched;  // keys of modules this model does not have
    std::set<std::string> formats;
    for (const SafetensorsEntry& e : file->entries()) {
      if (e.name.find("dora_scale") != std::string::npos)
        fail_input("{}: key '{}': DoRA (dora_scale) is not supported (diffusers drops it and runs what is left, "
                   "which is not the adapter that was trained)",
                   path, e.name);
      const auto meaning = parse_key(e.name);
      if (!meaning) {
        const bool none_known = std::none_of(file->entries().begin(), file->entries().end(),
                                             [](const SafetensorsEntry& x) { return parse_key(x.name).has_value(); });
        if (none_known) {
          std::vector<std::string> some;
          for (size_t i = 0; i < std::min<size_t>(3, file->entries().size()); ++i)
            some.push_back("'" + file->entries()[i].name + "'");
          fail_input("{}: not a LoRA of any format ditbatch reads: none of its {} keys ends in .lora_A.weight, "
                     ".lora_B.weight, .lora_down.weight, .lora_up.weight or .alpha (e.g. {})",
                     path, file->entries().size(), fmt::join(some, ", "));
        }
        fail_input("{}: key '{}' is not a LoRA factor (expected <module>.lora_A.weight / .lora_B.weight, "
                   ".lora_down.weight / .lora_up.weight or .alpha, in the diffusers, Kohya lora_unet_ or "
                   "diffusion_model. names)",
                   path, e.name);
      }
      if (meaning->factor != Factor::Alpha && (meaning->module.empty() || !linears.count(meaning->module))) {
        unmatched.push_back(e.name);
        continue;
      }
      if (meaning->module.empty()) continue;  // an alpha of a module this model lacks: its factors say so
      if (e.dtype != DType::F32 && e.dtype != DType::BF16 && e.dtype != DType::F16)
        fail_input("{}: key '{}' is {} (a LoRA factor is F32, BF16 or F16)", path, e.name, dtype_name(e.dtype));
      ModuleKeys& keys = modules[meaning->module];
      const SafetensorsEntry** slot = meaning->factor == Factor::Down ? &keys.down
                                      : meaning->factor == Factor::Up ? &keys.up
                                                                      : &keys.alpha;
      if (*slot)
        fail_input("{}: keys '{}' and '{}' are the same factor of module {}", path, (*slot)->name, e.name,
                   meaning->module);
      *slot = &e;
      if (!meaning->format.empty()) formats.insert(meaning->format);
    }
    const size_t matched = std::count_if(modules.begin(), modules.end(),
                                         [](const auto& m) { return m.second.down || m.second.up; });
    if (matched == 0) {
      std::vector<std::string> some;
      for (size_t i = 0; i < std::min<size_t>(3, unmatched.size()); ++i) some.push_back("'" + unmatched[i] + "'");
      fail_input("{}: none of its {} LoRA keys names a linear of {}: a LoRA for another model? (e.g. {})", path,
                 file->entries().size(), targets.model, fmt::join(some, ", "));
    }
    if (!unmatched.empty()) {
      const auto meaning = parse_key(unmatched[0]);
      fail_input("{}: key '{}' is for module '{}', which this transformer does not have ({}){}", path, unmatched[0],
                 meaning->module.empty() ? unmatched[0] : meaning->module,
                 missing_module_reason(meaning->module, targets.num_layers, linear_names),
                 unmatched.size() > 1 ? fmt::format("; {} such keys in all", unmatched.size()) : "");
    }
    if (meta.present) formats.insert("LoraConfig metadata");
    info.formats = fmt::format("{}", fmt::join(formats, ", "));

    // Each module: shapes, finite values, the scale.
    std::vector<Pending> pending;
    for (const auto& [module, keys] : modules) {
      if (!keys.down && !keys.up) continue;  // an alpha alone: diffusers drops it too
      if (!keys.down || !keys.up)
        fail_input("{}: key '{}' has no matching {} for module {}", path, (keys.down ? keys.down : keys.up)->name,
                   keys.down ? "lora_up / lora_B" : "lora_down / lora_A", module);
      const Shape& w = linears.at(module);  // [out, in]
      const Shape& ds = keys.down->shape;
      const Shape& us = keys.up->shape;
      if (ds.size() != 2 || ds[1] != w[1] || ds[0] < 1)
        fail_input("{}: key '{}' is {} but module {} has weight {}: lora_down / lora_A must be [rank, {}]", path,
                   keys.down->name, shape_str(ds), module, shape_str(w), w[1]);
      if (us.size() != 2 || us[0] != w[0] || us[1] != ds[0])
        fail_input("{}: key '{}' is {} but module {} has weight {} and its lora_down / lora_A has rank {}: lora_up / "
                   "lora_B must be [{}, {}]",
                   path, keys.up->name, shape_str(us), module, shape_str(w), ds[0], w[0], ds[0]);
      const int64_t rank = ds[0];
      check_finite(path, keys.down->name, file->tensor(*keys.down).to_f32());
      check_finite(path, keys.up->name, file->tensor(*keys.up).to_f32());
      double scale = request.strength;
      if (keys.alpha) {
        const Tensor alpha = file->tensor(*keys.alpha).to_f32();
        if (alpha.numel() != 1)
          fail_input("{}: key '{}' is {}: an alpha holds one value", path, keys.alpha->name, shape_str(keys.alpha->shape));
        check_finite(path, keys.alpha->name, alpha);
        scale *= static_cast<double>(alpha.data<float>()[0]) / static_cast<double>(rank);
      }
      if (meta.present) {
        if (!is_target(path, meta.target_modules, module))
          fail_input("{}: key '{}': module {} is not among the target_modules {} of the LoraConfig in the file's "
                     "metadata (diffusers would leave it out)",
                     path, keys.down->name, module, json_excerpt(meta.target_modules));
        const auto* r_value = pattern_value(path, "a rank_pattern key", meta.rank_pattern, module);
        const auto* a_value = pattern_value(path, "an alpha_pattern key", meta.alpha_pattern, module);
        const double r = r_value && r_value->is_number() ? r_value->get<double>() : static_cast<double>(meta.r);
        const double a = a_value && a_value->is_number() ? a_value->get<double>() : meta.lora_alpha;
        if (r != static_cast<double>(rank))
          fail_input("{}: key '{}' has rank {} but the LoraConfig in the file's metadata says r = {} for module {}",
                     path, keys.down->name, rank, r, module);
        scale *= meta.use_rslora ? a / std::sqrt(r) : a / r;
      }
      pending.push_back({module, LoraPatch{index, keys.down->name, keys.up->name, rank, scale}});
    }
    info.modules = static_cast<int64_t>(pending.size());
    info.sha256 = sha256_file(path);
    for (const LoraFile& earlier : set.files_)
      if (earlier.sha256 == info.sha256)  // merged twice without a word, once
        fail_input("--lora {}: the same LoRA as --lora {} (sha256 {}): give it once, with the strengths added", path,
                   earlier.path, info.sha256.substr(0, 12));
    set.files_.push_back(std::move(info));
    per_file.push_back(std::move(pending));
  }
  // Merge order: by content and strength, not by the order of the options.
  std::vector<size_t> order(set.files_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const LoraFile &x = set.files_[a], &y = set.files_[b];
    return std::tie(x.sha256, x.strength) < std::tie(y.sha256, y.strength);
  });
  for (size_t i : order)
    for (const Pending& p : per_file[i]) set.patches_[p.module].push_back(p.patch);
  return set;
}

int64_t LoraSet::patch_count() const {
  int64_t n = 0;
  for (const auto& [module, patches] : patches_) n += static_cast<int64_t>(patches.size());
  return n;
}

std::string LoraSet::to_json() const {
  nlohmann::json files = nlohmann::json::array(), patches = nlohmann::json::object();
  for (const LoraFile& f : files_)
    files.push_back({{"path", f.path}, {"name", f.name}, {"sha256", f.sha256}, {"strength", f.strength},
                     {"formats", f.formats}, {"modules", f.modules}});
  for (const auto& [module, list] : patches_)
    for (const LoraPatch& p : list)
      patches[module].push_back({{"file", p.file}, {"down", p.down_key}, {"up", p.up_key}, {"rank", p.rank},
                                 {"scale", p.scale}});
  return nlohmann::json{{"files", files}, {"patches", patches}}.dump();
}

LoraSet LoraSet::from_json(const std::string& json) {
  const auto j = nlohmann::json::parse(json);
  LoraSet set;
  for (const auto& f : j["files"])
    set.files_.push_back({f["path"], f["name"], f["sha256"], f["strength"], f["formats"], f["modules"]});
  for (const auto& [module, list] : j["patches"].items())
    for (const auto& p : list)
      set.patches_[module].push_back({p["file"], p["down"], p["up"], p["rank"], p["scale"]});
  return set;
}

nlohmann::json LoraSet::provenance() const {
  nlohmann::json out = nlohmann::json::array();
  for (const LoraFile& f : files_) out.push_back({{"file", f.name}, {"sha256", f.sha256}, {"strength", f.strength}});
  return out;
}

std::string lora_set_key(const nlohmann::json& provenance) {
  std::vector<std::string> entries;
  if (provenance.is_array())
    for (const auto& e : provenance) {
      // An entry of another shape (a hand-edited manifest line) is its JSON: it matches no LoRA.
      const nlohmann::json sha256 = e.is_object() ? e.value("sha256", nlohmann::json("")) : nlohmann::json();
      const nlohmann::json strength = e.is_object() ? e.value("strength", nlohmann::json(0.0)) : nlohmann::json();
      entries.push_back(sha256.is_string() && strength.is_number()
                            ? fmt::format("{}:{}", sha256.get<std::string>(), strength.get<double>())
                            : "?" + e.dump());
    }
  std::sort(entries.begin(), entries.end());
  return fmt::format("{}", fmt::join(entries, ","));
}

}  // namespace ditbatch
