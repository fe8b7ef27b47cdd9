#include "io/config.h"

#include "core/error.h"
#include "io/json_text.h"

namespace ditbatch {

Config Config::parse(const std::string& text, const std::string& where) {
  nlohmann::json json;
  try {
    json = parse_json(text);
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: config is not valid JSON: {}", where, e.what());
  }
  if (!json.is_object()) fail_input("{}: config must be a JSON object", where);
  return Config(std::move(json), where);
}

const nlohmann::json* Config::find(const std::string& key) const {
  const nlohmann::json* node = &json_;
  size_t start = 0;
  while (true) {
    size_t dot = key.find('.', start);
    std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
    if (dot == std::string::npos) return node->is_null() ? nullptr : node;
    start = dot + 1;
  }
}

bool Config::has(const std::string& key) const { return find(key) != nullptr; }

const nlohmann::json& Config::lookup(const std::string& key) const {
  const nlohmann::json* v = find(key);
  if (!v) fail_input("{}: config key '{}' is missing", where_, key);
  return *v;
}

int64_t Config::get_int(const std::string& key) const {
  const auto& v = lookup(key);
  if (v.is_boolean()) return v.get<bool>();
  if (!v.is_number_integer()) fail_input("{}: config '{}' = {} is not an integer", where_, key, json_excerpt(v));
  return v.get<int64_t>();
}

int64_t Config::get_int(const std::string& key, int64_t min, int64_t max) const {
  const auto& v = lookup(key);
  const int64_t value = get_int(key);
  // A JSON integer past int64 (an unsigned one) must not wrap into the range.
  if (value < min || value > max || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max)))
    fail_input("{}: config '{}' = {} is out of range (expected {}..{})", where_, key, json_excerpt(v), min, max);
  return value;
}

double Config::get_double(const std::string& key) const {
  const auto& v = lookup(key);
  if (!v.is_number()) fail_input("{}: config '{}' = {} is not a number", where_, key, json_excerpt(v));
  return v.get<double>();
}

bool Config::get_bool(const std::string& key) const {
  const auto& v = lookup(key);
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<int64_t>() != 0;
  fail_input("{}: config '{}' = {} is not a boolean", where_, key, json_excerpt(v));
}

std::string Config::get_string(const std::string& key) const {
  const auto& v = lookup(key);
  if (!v.is_string()) fail_input("{}: config '{}' = {} is not a string", where_, key, json_excerpt(v));
  return v.get<std::string>();
}

std::vector<int64_t> Config::get_ints(const std::string& key) const {
  const auto& v = lookup(key);
  if (!v.is_array()) fail_input("{}: config '{}' = {} is not a list", where_, key, json_excerpt(v));
  std::vector<int64_t> out;
  for (const auto& x : v) {
    if (x.is_boolean()) out.push_back(x.get<bool>());
    else if (x.is_number_integer()) out.push_back(x.get<int64_t>());
    else fail_input("{}: config '{}' = {} is not a list of integers", where_, key, json_excerpt(v));
  }
  return out;
}

std::vector<double> Config::get_doubles(const std::string& key) const {
  const auto& v = lookup(key);
  if (!v.is_array()) fail_input("{}: config '{}' = {} is not a list", where_, key, json_excerpt(v));
  std::vector<double> out;
  for (const auto& x : v) {
    if (!x.is_number()) fail_input("{}: config '{}' = {} is not a list of numbers", where_, key, json_excerpt(v));
    out.push_back(x.get<double>());
  }
  return out;
}

}  // namespace ditbatch
