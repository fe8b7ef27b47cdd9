#include "io/image_record.h"

#include <limits>

#include "io/json_text.h"

namespace ditbatch {

using nlohmann::json;

nlohmann::json file_stat_json(const FileStat& st) {
  return {{"size", st.size}, {"mtime_ns", st.mtime_ns}, {"inode", st.inode}, {"device", st.device}};
}

std::optional<FileStat> file_stat_from_json(const nlohmann::json& value) {
  if (!value.is_object()) return std::nullopt;
  auto integer = [&](const char* key, auto& out) {
    const auto v = value.find(key);
    if (v == value.end() || !v->is_number_integer()) return false;
    out = v->get<std::remove_reference_t<decltype(out)>>();
    return true;
  };
  FileStat st;
  if (!integer("size", st.size) || !integer("mtime_ns", st.mtime_ns) || !integer("inode", st.inode) ||
      !integer("device", st.device))
    return std::nullopt;
  return st;
}

json ImageRecord::to_json() const {
  json j = json::object();
  j["index"] = index;
  j["prompt"] = prompt;
  j["negative_prompt"] = negative_prompt;
  j["seed"] = seed;
  j["width"] = width;
  j["height"] = height;
  j["steps"] = steps;
  j["cfg"] = cfg;
  j["true_cfg"] = true_cfg;
  j["model"] = model;
  j["model_checksum"] = model_checksum;
  j["loras"] = loras;
  j["scheduler"] = scheduler;
  if (!text_positions.empty()) j["text_positions"] = text_positions;
  if (max_sequence_length) j["max_sequence_length"] = *max_sequence_length;
  if (prompt_tokens) j["prompt_tokens"] = *prompt_tokens;
  if (negative_prompt_tokens) j["negative_prompt_tokens"] = *negative_prompt_tokens;
  if (images_per_tar) j["images_per_tar"] = *images_per_tar;
  if (!input_images.empty()) j["input_images"] = input_images;
  j["run_id"] = run_id;
  j["host"] = host;
  j["rank"] = rank;
  j["started"] = started;
  j["finished"] = finished;
  j["timings"] = {{"text_encoder_s", timings.text_encoder_s},
                  {"transformer_s", timings.transformer_s},
                  {"vae_s", timings.vae_s},
                  {"total_s", timings.total_s},
                  {"write_s", timings.write_s}};
  j["status"] = status;
  if (error) j["error"] = *error;
  j["file"] = file;
  if (sha256) j["sha256"] = *sha256;
  if (file_stat) j["file_stat"] = file_stat_json(*file_stat);
  if (latents_file) j["latents_file"] = *latents_file;
  if (latents_sha256) j["latents_sha256"] = *latents_sha256;
  if (latents_file_stat) j["latents_file_stat"] = file_stat_json(*latents_file_stat);
  if (json_file) j["json_file"] = *json_file;
  if (json_sha256) j["json_sha256"] = *json_sha256;
  if (json_file_stat) j["json_file_stat"] = file_stat_json(*json_file_stat);
  for (const auto& [m, prefix] : {std::pair{&member, "member"}, std::pair{&json_member, "json_member"}})
    if (*m) {
      j[prefix] = (*m)->name;
      j[std::string(prefix) + "_offset"] = (*m)->offset;
      j[std::string(prefix) + "_size"] = (*m)->size;
    }
  for (const auto& [key, value] : other.items()) j[key] = value;  // as read, over a field's default
  return j;
}

std::string ImageRecord::sample_text() const {
  json sample = to_json();
  sample.erase("file");
  sample.erase("file_stat");
  return sample.dump();
}

namespace {

// Reads the fields of one object into typed values, taking each only when its value is of the
// type to_json writes there (so that writing it back gives the bytes read); whatever is left is
// the record's `other`.
class FieldReader {
 public:
  explicit FieldReader(const json& object) : rest_(object) {}
  json rest() && { return std::move(rest_); }

  void string(const char* key, std::string& out) {
    if (auto v = take(key, [](const json& v) { return v.is_string(); })) out = v->get<std::string>();
  }
  void string(const char* key, std::optional<std::string>& out) {
    if (auto v = take(key, [](const json& v) { return v.is_string(); })) out = v->get<std::string>();
  }
  template <typename Int>
  void integer(const char* key, Int& out) {
    if (auto v = take(key, fits<Int>)) out = v->template get<Int>();
  }
  void integer(const char* key, std::optional<int64_t>& out) {
    if (auto v = take(key, fits<int64_t>)) out = v->get<int64_t>();
  }
  void number(const char* key, double& out) {
    if (auto v = take(key, [](const json& v) { return v.is_number_float(); })) out = v->get<double>();
  }
  void boolean(const char* key, bool& out) {
    if (auto v = take(key, [](const json& v) { return v.is_boolean(); })) out = v->get<bool>();
  }
  void array(const char* key, json& out) {
    if (auto v = take(key, [](const json& v) { return v.is_array(); })) out = std::move(*v);
  }
  void stat(const char* key, std::optional<FileStat>& out) {
    if (auto v = take(key, is_stat)) out = file_stat_from_json(*v);
  }
  void timings(const char* key, ImageTimings& out) {
    static constexpr const char* kStages[] = {"text_encoder_s", "transformer_s", "vae_s", "total_s", "write_s"};
    auto whole = [](const json& v) {
      if (!v.is_object() || v.size() != std::size(kStages)) return false;
      for (const char* stage : kStages)
        if (!v.contains(stage) || !v[stage].is_number_float()) return false;
      return true;
    };
    if (auto v = take(key, whole))
      out = {(*v)["text_encoder_s"].get<double>(), (*v)["transformer_s"].get<double>(), (*v)["vae_s"].get<double>(),
             (*v)["total_s"].get<double>(), (*v)["write_s"].get<double>()};
  }
  // "member", "member_offset", "member_size": all three, or none taken.
  void member(const std::string& prefix, std::optional<TarMember>& out) {
    const std::string offset = prefix + "_offset", size = prefix + "_size";
    const auto name = rest_.find(prefix), o = rest_.find(offset), s = rest_.find(size);
    if (name == rest_.end() || o == rest_.end() || s == rest_.end() || !name->is_string() || !fits<int64_t>(*o) ||
        !fits<int64_t>(*s))
      return;
    out = TarMember{name->get<std::string>(), o->get<int64_t>(), s->get<int64_t>()};
    rest_.erase(prefix);
    rest_.erase(offset);
    rest_.erase(size);
  }

 private:
  template <typename Int>
  static bool fits(const json& v) {
    if (!v.is_number_integer()) return false;
    if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<Int>::max());
    return std::numeric_limits<Int>::is_signed || v.get<int64_t>() >= 0;
  }
  static bool is_stat(const json& v) {
    const std::optional<FileStat> st = file_stat_from_json(v);
    return st && v.size() == 4 && fits<int64_t>(v["size"]) && fits<int64_t>(v["mtime_ns"]) &&
           fits<uint64_t>(v["inode"]) && fits<uint64_t>(v["device"]);
  }
  // The value under `key` when `typed` accepts it (removed from the rest), else nullopt.
  template <typename Check>
  std::optional<json> take(const char* key, Check typed) {
    const auto it = rest_.find(key);
    if (it == rest_.end() || !typed(*it)) return std::nullopt;
    json v = std::move(*it);
    rest_.erase(it);
    return v;
  }

  json rest_;
};

}  // namespace

ImageRecord ImageRecord::from_json(const json& object) {
  ImageRecord r;
  FieldReader read(object);
  read.integer("index", r.index);
  read.string("prompt", r.prompt);
  read.string("negative_prompt", r.negative_prompt);
  read.integer("seed", r.seed);
  read.integer("width", r.width);
  read.integer("height", r.height);
  read.integer("steps", r.steps);
  read.number("cfg", r.cfg);
  read.boolean("true_cfg", r.true_cfg);
  read.string("model", r.model);
  read.string("model_checksum", r.model_checksum);
  read.array("loras", r.loras);
  read.string("scheduler", r.scheduler);
  read.string("text_positions", r.text_positions);
  read.integer("max_sequence_length", r.max_sequence_length);
  read.integer("prompt_tokens", r.prompt_tokens);
  read.integer("negative_prompt_tokens", r.negative_prompt_tokens);
  read.integer("images_per_tar", r.images_per_tar);
  read.array("input_images", r.input_images);
  read.string("run_id", r.run_id);
  read.string("host", r.host);
  read.integer("rank", r.rank);
  read.string("started", r.started);
  read.string("finished", r.finished);
  read.timings("timings", r.timings);
  read.string("status", r.status);
  read.string("error", r.error);
  read.string("file", r.file);
  read.string("sha256", r.sha256);
  read.stat("file_stat", r.file_stat);
  read.string("latents_file", r.latents_file);
  read.string("latents_sha256", r.latents_sha256);
  read.stat("latents_file_stat", r.latents_file_stat);
  read.string("json_file", r.json_file);
  read.string("json_sha256", r.json_sha256);
  read.stat("json_file_stat", r.json_file_stat);
  read.member("member", r.member);
  read.member("json_member", r.json_member);
  r.other = std::move(read).rest();
  return r;
}

std::optional<ImageRecord> ImageRecord::parse(std::string_view text) {
  const json object = parse_json(text, nullptr, false);
  if (!object.is_object()) return std::nullopt;
  return from_json(object);
}

}  // namespace ditbatch
