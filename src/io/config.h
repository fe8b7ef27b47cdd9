// A model's configuration (the diffusers/transformers config.json) with typed accessors whose
// errors name where the config came from and the key: "w.h5:/vae: config key 'z_dim' is missing".
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ditbatch {

// Bounds on the sizes a model config may give, far past any real model (Qwen-Image: 60 blocks,
// widths up to 18,944, 152,064 vocabulary rows). Inside them every shape, product and memory
// estimate computed from a config fits in int64 and a model's tensor list stays short, so a
// corrupt or hostile config fails with its key named instead of overflowing or exhausting memory.
inline constexpr int64_t kMaxConfigWidth = int64_t{1} << 20;  // a tensor dimension, also a product of two
inline constexpr int64_t kMaxConfigDepth = 1024;              // layers, blocks, resnets per block
inline constexpr int64_t kMaxConfigVocab = int64_t{1} << 24;  // embedding rows

class Config {
 public:
  Config() : json_(nlohmann::json::object()) {}
  Config(nlohmann::json json, std::string where) : json_(std::move(json)), where_(std::move(where)) {}
  // Parses a JSON text (errors name `where`).
  static Config parse(const std::string& text, const std::string& where);

  const nlohmann::json& json() const { return json_; }
  const std::string& where() const { return where_; }
  // Keys may be dotted to reach nested objects: "text_config.hidden_size".
  bool has(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  // An integer in min..max; outside is an error naming the key, the value and the range.
  int64_t get_int(const std::string& key, int64_t min, int64_t max) const;
  double get_double(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  std::vector<int64_t> get_ints(const std::string& key) const;
  std::vector<double> get_doubles(const std::string& key) const;

 private:
  const nlohmann::json* find(const std::string& key) const;
  const nlohmann::json& lookup(const std::string& key) const;
  nlohmann::json json_;
  std::string where_;
};

}  // namespace ditbatch
