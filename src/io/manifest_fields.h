// The fields of a manifest line that resume reads, parsed straight from its bytes (simdjson)
// without building a JSON tree: a rerun over a million images reads a million lines, and
// nlohmann's tree of each took most of its start. Only the shapes ditbatch writes are read
// here. A line this parser refuses, or one that gives a key twice (nlohmann keeps the last,
// simdjson's fields the first), is `Unsure`: its caller reads it with the full parser
// (parse_manifest_line), so that no verdict depends on which parser read a line.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/fs.h"

namespace ditbatch {

// Views into the parser's memory: valid until its next parse.
struct ManifestFields {
  int64_t index = 0;
  // As resume reads a string field: "" when absent or not a string.
  std::string_view status, file, sha256, latents_file, latents_sha256, model_checksum;
  // As recorded_file_stat reads one: nullopt unless an object of four integers.
  std::optional<FileStat> file_stat, latents_file_stat;
  // The settings, each nullopt when absent or of another type than ditbatch writes (its caller
  // then asks the full parser what changed, which also words the message).
  std::optional<std::string_view> prompt, negative_prompt;
  std::optional<uint64_t> seed;                // a non-negative integer
  std::optional<int64_t> width, height, steps;  // integers
  std::optional<float> cfg;                     // any number, as a float (it is written from one)
  // As an integer field is read: 0 when absent or not an integer.
  int64_t max_sequence_length = 0, prompt_tokens = 0, negative_prompt_tokens = 0;
  std::string loras = "[]";                     // the value, minified ("[]" when absent)
  std::string input_images;                     // the value, minified ("" when absent)
  std::optional<std::string_view> scheduler;    // nullopt: absent
  std::string_view text_positions;              // "" when absent (the default)
  // A WebDataset folder's: images_per_tar as an integer field is read; the record beside a
  // staged PNG as the image's file; a packed image's members (nullopt unless a string; an
  // offset or size -1 unless an integer, as output_check reads them).
  int64_t images_per_tar = 0;
  std::string_view json_file, json_sha256;
  std::optional<FileStat> json_file_stat;
  std::optional<std::string_view> member, json_member;
  int64_t member_offset = -1, member_size = -1, json_member_offset = -1, json_member_size = -1;
};

class ManifestFieldParser {
 public:
  enum Verdict {
    Fields,     // `fields` holds the line's
    NotALine,   // not an object with an integer "index" (as parse_manifest_line says)
    Unsure,     // read it with the full parser
  };
  ManifestFieldParser();
  ~ManifestFieldParser();
  ManifestFieldParser(const ManifestFieldParser&) = delete;
  ManifestFieldParser& operator=(const ManifestFieldParser&) = delete;
  Verdict parse(std::string_view line, ManifestFields& fields);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ditbatch
