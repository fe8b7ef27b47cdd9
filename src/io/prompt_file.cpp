#include "io/prompt_file.h"

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include <cmath>
#include <cstdint>
#include <set>

#include "core/error.h"
#include "core/fs.h"
#include "io/json_text.h"

namespace ditbatch {

namespace {

// Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), as utf8proc
// decodes it: the tokenizer and the JSON manifest both need well-formed text.
bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t code = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &code);
    if (n <= 0 || code < 0) return false;
    p += n;
    left -= n;
  }
  return true;
}

std::vector<std::string> split_lines(const std::string& contents) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < contents.size()) {
    size_t end = contents.find('\n', start);
    if (end == std::string::npos) end = contents.size();
    std::string line = contents.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
    lines.push_back(std::move(line));
    start = end + 1;
  }
  return lines;
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// A JSON number that is a whole number too large for a 64-bit integer (1e20, 2^64): out of
// range, not "not an integer". (A negative seed stays "must be a non-negative integer".)
bool whole_but_out_of_range(const nlohmann::json& v, bool is_unsigned) {
  if (v.is_number_unsigned()) return !is_unsigned && v.get<uint64_t>() > INT64_MAX;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && d == std::floor(d) && (is_unsigned ? d >= 0x1p64 : (d < -0x1p63 || d >= 0x1p63));
}

// One field of a jsonl object, type-checked; errors say file:line, the field, what was found.
// Integers take the range they must lie in, for the message.
template <typename T>
std::optional<T> field(const nlohmann::json& obj, const char* key, const std::string& where,
                       const std::string& range = "") {
  if (!obj.contains(key) || obj[key].is_null()) return std::nullopt;
  const auto& v = obj[key];
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) fail_input("{}: \"{}\" must be a string, found {}", where, key, json_excerpt(v));
    return v.get<std::string>();
  } else if constexpr (std::is_same_v<T, double>) {
    if (!v.is_number()) fail_input("{}: \"{}\" must be a number, found {}", where, key, json_excerpt(v));
    return v.get<double>();
  } else {
    constexpr bool is_unsigned = std::is_same_v<T, uint64_t>;
    if (whole_but_out_of_range(v, is_unsigned))
      fail_input("{}: \"{}\" {} is out of range ({})", where, key, json_excerpt(v), range);
    if (!v.is_number_integer() || (is_unsigned && !v.is_number_unsigned()))
      fail_input("{}: \"{}\" must be {}integer, found {}", where, key, is_unsigned ? "a non-negative " : "an ", json_excerpt(v));
    return v.get<T>();
  }
}

// The object of one jsonl line; a key given twice is refused (a parser alone keeps the last,
// and {"prompt": "a", "prompt": "b"} would silently make "b").
nlohmann::json parse_object(const std::string& line, const std::string& where) {
  std::set<std::string> keys;
  std::string repeated;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && !keys.insert(parsed.get<std::string>()).second &&
        repeated.empty())
      repeated = parsed.get<std::string>();
    return true;
  };
  nlohmann::json obj;
  try {
    obj = parse_json(line, callback);
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: not valid JSON: {}", where, e.what());
  }
  if (!repeated.empty()) fail_input("{}: \"{}\" is given twice; give each field once", where, repeated);
  return obj;
}

// "image": one path or a list of them; each a non-empty string.
std::vector<std::string> image_paths(const nlohmann::json& obj, const std::string& where) {
  if (!obj.contains("image") || obj["image"].is_null()) return {};
  const nlohmann::json& v = obj["image"];
  const nlohmann::json list = v.is_array() ? v : nlohmann::json::array({v});
  if (list.empty()) fail_input("{}: \"image\" is an empty list; give a path, a list of paths, or no \"image\"", where);
  std::vector<std::string> paths;
  for (const nlohmann::json& item : list) {
    if (!item.is_string() || item.get_ref<const std::string&>().empty())
      fail_input("{}: \"image\" must be a path or a list of paths (non-empty strings), found {}", where,
                 json_excerpt(item));
    const std::string& path = item.get_ref<const std::string&>();
    if (path.find('\0') != std::string::npos) fail_input("{}: \"image\" path holds a NUL character", where);
    paths.push_back(path);
  }
  return paths;
}

PromptEntry parse_jsonl_line(const std::string& line, const std::string& where, const std::string& folder) {
  const nlohmann::json obj = parse_object(line, where);
  if (!obj.is_object()) fail_input("{}: each line must be a JSON object like {{\"prompt\": \"...\"}}", where);
  static const std::set<std::string> known = {"prompt", "negative_prompt", "seed", "width", "height",
                                              "steps",  "cfg",             "name", "image"};
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (!known.count(it.key()))
      fail_input(
          "{}: unknown field \"{}\" (allowed: prompt, negative_prompt, seed, width, height, steps, cfg, name, image)",
          where, it.key());
  PromptEntry e;
  e.origin = where;
  auto prompt = field<std::string>(obj, "prompt", where);
  if (!prompt) fail_input("{}: missing \"prompt\"", where);
  e.prompt = *prompt;
  e.negative_prompt = field<std::string>(obj, "negative_prompt", where);
  e.no_negative_prompt = obj.contains("negative_prompt") && obj["negative_prompt"].is_null();
  const std::string side = fmt::format("{}..{} pixels", kMinImageSide, kMaxImageSide);
  e.seed = field<uint64_t>(obj, "seed", where, "0..18446744073709551615");
  e.width = field<int64_t>(obj, "width", where, side);
  e.height = field<int64_t>(obj, "height", where, side);
  e.steps = field<int64_t>(obj, "steps", where, fmt::format("{}..{}", kMinSteps, kMaxSteps));
  e.cfg = field<double>(obj, "cfg", where);
  e.name = field<std::string>(obj, "name", where);
  e.images = image_paths(obj, where);
  for (const std::string& path : e.images)
    e.image_files.push_back(path.starts_with('/') || folder.empty() ? path
                            : folder.ends_with('/')                 ? folder + path
                                                                    : folder + "/" + path);
  return e;
}

}  // namespace

std::vector<PromptEntry> parse_prompt_text(const std::string& contents, const std::string& name) {
  const bool jsonl = name.ends_with(".jsonl");
  if (!jsonl && !name.ends_with(".txt"))
    fail_input("{}: unknown prompt file type (use .txt, one prompt per line, or .jsonl)", name);
  std::vector<PromptEntry> entries;
  // A UTF-8 byte order mark (Windows editors write one) is not part of the first prompt.
  const bool bom = contents.starts_with("\xEF\xBB\xBF");
  // Image paths of the lines are taken from the file's folder.
  const size_t slash = name.rfind('/');
  const std::string folder = slash == std::string::npos ? "" : slash == 0 ? "/" : name.substr(0, slash);
  const auto lines = split_lines(bom ? contents.substr(3) : contents);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string where = fmt::format("{}:{}", name, i + 1);
    const std::string& line = lines[i];
    if (!valid_utf8(line)) fail_input("{}: not valid UTF-8", where);
    if (blank(line)) continue;
    if (jsonl) {
      entries.push_back(parse_jsonl_line(line, where, folder));
    } else {
      if (line[line.find_first_not_of(" \t")] == '#') continue;  // a comment (also indented); prompts are kept verbatim
      PromptEntry e;
      e.prompt = line;
      e.origin = where;
      entries.push_back(std::move(e));
    }
  }
  return entries;
}

std::vector<PromptEntry> read_prompt_file(const std::string& path) { return parse_prompt_text(read_file(path), path); }

}  // namespace ditbatch
