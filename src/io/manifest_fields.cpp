#include "io/manifest_fields.h"

#include <simdjson.h>

#include <array>

namespace ditbatch {

namespace {

enum Field : uint8_t {
  kIndex, kStatus, kFile, kSha256, kFileStat, kLatentsFile, kLatentsSha256, kLatentsFileStat, kPrompt,
  kNegativePrompt, kSeed, kWidth, kHeight, kSteps, kCfg, kModelChecksum, kMaxSequenceLength, kPromptTokens,
  kNegativePromptTokens, kLoras, kScheduler, kImagesPerTar, kMember, kMemberOffset, kMemberSize, kJsonFile,
  kJsonSha256, kJsonFileStat, kJsonMember, kJsonMemberOffset, kJsonMemberSize, kInputImages, kTextPositions, kFieldCount,
  kOther = kFieldCount
};
static_assert(kFieldCount <= 64, "a field's bit in `seen`");

constexpr std::array<std::string_view, kFieldCount> kNames = {
    "index", "status", "file", "sha256", "file_stat", "latents_file", "latents_sha256", "latents_file_stat",
    "prompt", "negative_prompt", "seed", "width", "height", "steps", "cfg", "model_checksum",
    "max_sequence_length", "prompt_tokens", "negative_prompt_tokens", "loras", "scheduler", "images_per_tar",
    "member", "member_offset", "member_size", "json_file", "json_sha256", "json_file_stat", "json_member",
    "json_member_offset", "json_member_size", "input_images", "text_positions"};

Field field_of(std::string_view key) {
  for (uint8_t f = 0; f < kFieldCount; ++f)
    if (kNames[f].size() == key.size() && kNames[f] == key) return static_cast<Field>(f);
  return kOther;
}

using simdjson::dom::element;
using simdjson::dom::element_type;

std::optional<std::string_view> string_or_none(element v) {
  std::string_view s;
  return v.get_string().get(s) == simdjson::SUCCESS ? std::optional(s) : std::nullopt;
}

std::string_view string_or_empty(element v) {
  std::string_view s;
  return v.get_string().get(s) == simdjson::SUCCESS ? s : std::string_view();
}

// An integer as nlohmann's get<T> gives it (an unsigned one above INT64_MAX cast, as it does).
template <typename T>
std::optional<T> integer(element v) {
  if (v.type() == element_type::INT64) return static_cast<T>(int64_t(v));
  if (v.type() == element_type::UINT64) return static_cast<T>(uint64_t(v));
  return std::nullopt;
}

// recorded_file_stat: an object whose size, mtime_ns, inode and device are integers. A key given
// twice: `unsure` (nlohmann keeps the last).
std::optional<FileStat> file_stat(element v, bool& unsure) {
  simdjson::dom::object object;
  if (v.get_object().get(object) != simdjson::SUCCESS) return std::nullopt;
  FileStat st;
  unsigned seen = 0, whole = 0;
  for (const auto field : object) {
    static constexpr std::array<std::string_view, 4> keys = {"size", "mtime_ns", "inode", "device"};
    for (unsigned k = 0; k < keys.size(); ++k) {
      if (field.key != keys[k]) continue;
      if (seen & (1u << k)) unsure = true;
      seen |= 1u << k;
      bool ok = false;
      switch (k) {
        case 0: if (auto i = integer<int64_t>(field.value)) st.size = *i, ok = true; break;
        case 1: if (auto i = integer<int64_t>(field.value)) st.mtime_ns = *i, ok = true; break;
        case 2: if (auto i = integer<uint64_t>(field.value)) st.inode = *i, ok = true; break;
        case 3: if (auto i = integer<uint64_t>(field.value)) st.device = *i, ok = true; break;
      }
      whole = ok ? whole | (1u << k) : whole & ~(1u << k);
    }
  }
  if (whole != 0xF) return std::nullopt;
  return st;
}

}  // namespace

struct ManifestFieldParser::Impl {
  simdjson::dom::parser parser;
};

ManifestFieldParser::ManifestFieldParser() : impl_(std::make_unique<Impl>()) {}
ManifestFieldParser::~ManifestFieldParser() = default;

ManifestFieldParser::Verdict ManifestFieldParser::parse(std::string_view line, ManifestFields& out) {
  element doc;
  // (copied into the parser's padded buffer: simdjson reads in blocks past the end)
  if (impl_->parser.parse(line.data(), line.size(), true).get(doc) != simdjson::SUCCESS) return Unsure;
  simdjson::dom::object object;
  if (doc.get_object().get(object) != simdjson::SUCCESS) return NotALine;
  out = ManifestFields();
  uint64_t seen = 0;
  bool unsure = false, has_index = false;
  for (const auto field : object) {
    const Field f = field_of(field.key);
    if (f == kOther) continue;
    if (seen & (uint64_t{1} << f)) return Unsure;
    seen |= uint64_t{1} << f;
    const element v = field.value;
    switch (f) {
      case kIndex:
        if (auto i = integer<int64_t>(v)) out.index = *i, has_index = true;
        break;
      case kStatus: out.status = string_or_empty(v); break;
      case kFile: out.file = string_or_empty(v); break;
      case kSha256: out.sha256 = string_or_empty(v); break;
      case kLatentsFile: out.latents_file = string_or_empty(v); break;
      case kLatentsSha256: out.latents_sha256 = string_or_empty(v); break;
      case kModelChecksum: out.model_checksum = string_or_empty(v); break;
      case kFileStat: out.file_stat = file_stat(v, unsure); break;
      case kLatentsFileStat: out.latents_file_stat = file_stat(v, unsure); break;
      case kPrompt:
        if (v.is_string()) out.prompt = std::string_view(v);
        break;
      case kNegativePrompt:
        if (v.is_string()) out.negative_prompt = std::string_view(v);
        break;
      case kSeed:
        if (v.type() == element_type::UINT64) out.seed = uint64_t(v);
        else if (v.type() == element_type::INT64 && int64_t(v) >= 0) out.seed = static_cast<uint64_t>(int64_t(v));
        break;
      case kWidth: if (v.type() == element_type::INT64) out.width = int64_t(v); break;
      case kHeight: if (v.type() == element_type::INT64) out.height = int64_t(v); break;
      case kSteps: if (v.type() == element_type::INT64) out.steps = int64_t(v); break;
      case kCfg:  // nlohmann's get<float> of any number
        if (v.type() == element_type::DOUBLE) out.cfg = static_cast<float>(double(v));
        else if (v.type() == element_type::INT64) out.cfg = static_cast<float>(int64_t(v));
        else if (v.type() == element_type::UINT64) out.cfg = static_cast<float>(uint64_t(v));
        break;
      case kMaxSequenceLength: out.max_sequence_length = integer<int64_t>(v).value_or(0); break;
      case kPromptTokens: out.prompt_tokens = integer<int64_t>(v).value_or(0); break;
      case kNegativePromptTokens: out.negative_prompt_tokens = integer<int64_t>(v).value_or(0); break;
      case kLoras: out.loras = simdjson::minify(v); break;
      case kInputImages: out.input_images = simdjson::minify(v); break;
      case kImagesPerTar: out.images_per_tar = integer<int64_t>(v).value_or(0); break;
      case kMember: out.member = string_or_none(v); break;
      case kMemberOffset: out.member_offset = integer<int64_t>(v).value_or(-1); break;
      case kMemberSize: out.member_size = integer<int64_t>(v).value_or(-1); break;
      case kJsonFile: out.json_file = string_or_empty(v); break;
      case kJsonSha256: out.json_sha256 = string_or_empty(v); break;
      case kJsonFileStat: out.json_file_stat = file_stat(v, unsure); break;
      case kJsonMember: out.json_member = string_or_none(v); break;
      case kJsonMemberOffset: out.json_member_offset = integer<int64_t>(v).value_or(-1); break;
      case kJsonMemberSize: out.json_member_size = integer<int64_t>(v).value_or(-1); break;
      case kTextPositions:
        if (!v.is_string()) return Unsure;
        out.text_positions = std::string_view(v);
        break;
      case kScheduler:
        if (!v.is_string()) return Unsure;  // what the full path makes of it is its own affair
        out.scheduler = std::string_view(v);
        break;
      default: break;
    }
  }
  if (unsure) return Unsure;
  return has_index ? Fields : NotALine;
}

}  // namespace ditbatch
