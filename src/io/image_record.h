// One image's record: its line in manifest.jsonl and, less where its PNG lies, the .json of a
// WebDataset sample. Written and read here only, so that a field's name, type and presence are
// said once: users' tools join against these lines, and a rerun resumes from lines an older
// ditbatch wrote. The line is a JSON object whose keys come out sorted (nlohmann's std::map), so
// the bytes depend only on what the record holds, never on the order it was filled in.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "core/fs.h"

namespace ditbatch {

// Seconds per stage, "timings" in the line.
struct ImageTimings {
  double text_encoder_s = 0, transformer_s = 0, vae_s = 0, total_s = 0, write_s = 0;
  bool operator==(const ImageTimings&) const = default;
};

// Where a line lists one file of an image inside a tar ("member", "member_offset", ...).
struct TarMember {
  std::string name;
  int64_t offset = 0, size = 0;
  bool operator==(const TarMember&) const = default;
};

struct ImageRecord {
  // The settings the image was made with. Without true CFG it was made with no negative prompt
  // and cfg 1, and that is what is recorded ("true_cfg" says which).
  int64_t index = 0;
  std::string prompt, negative_prompt;
  uint64_t seed = 0;
  int64_t width = 0, height = 0, steps = 0;
  double cfg = 1.0;  // written from the job's float: 4.1f is 4.099999904632568 here
  bool true_cfg = false;
  // The model and the denoiser's setup: LoRAs (file, sha256, strength) and the scheduler.
  std::string model, model_checksum;
  nlohmann::json loras = nlohmann::json::array();
  std::string scheduler;
  std::string text_positions;  // an edit's image-token positions where not the default ("mrope"); "" otherwise
  // The prompt token limit and how many tokens each prompt had (absent when encoding failed).
  std::optional<int64_t> max_sequence_length, prompt_tokens, negative_prompt_tokens;
  std::optional<int64_t> images_per_tar;  // a WebDataset folder's
  // An edit's input images, [{"path": as the prompt line gives it, "sha256": of the file}] in
  // the line's order; none (and no field) for text-to-image.
  nlohmann::json input_images = nlohmann::json::array();

  // The run that made it.
  std::string run_id, host, started, finished;  // UTC, ISO 8601
  int64_t rank = 0;
  ImageTimings timings;
  std::string status;                // "ok" or "failed"
  std::optional<std::string> error;  // why it failed

  // Its files: the PNG (a path inside --out, or a WebDataset tar once packed), its latents file
  // (--output-type latent) and a staged sample's record beside it.
  std::string file;
  std::optional<std::string> sha256;
  std::optional<FileStat> file_stat;  // taken right after the rename (a packed image: the tar's)
  std::optional<std::string> latents_file, latents_sha256;
  std::optional<FileStat> latents_file_stat;
  std::optional<std::string> json_file, json_sha256;
  std::optional<FileStat> json_file_stat;
  std::optional<TarMember> member, json_member;  // a packed image's PNG and record in its tar

  // Every other field of a line that was read, and each field above whose value is not of the
  // type ditbatch writes there (another tool's line, or one edited by hand): written back as read.
  nlohmann::json other = nlohmann::json::object();

  bool operator==(const ImageRecord&) const = default;

  // The manifest line (without its newline), and the object it is.
  std::string manifest_line() const { return to_json().dump(); }
  nlohmann::json to_json() const;
  // A WebDataset sample's .json: the record less where its PNG lies ("file", "file_stat").
  std::string sample_text() const;
  // A line or sample read back; nullopt unless a JSON object.
  static std::optional<ImageRecord> parse(std::string_view text);
  static ImageRecord from_json(const nlohmann::json& object);
};

// The manifest's form of a file's stat, and back (nullopt unless all four are integers).
nlohmann::json file_stat_json(const FileStat& st);
std::optional<FileStat> file_stat_from_json(const nlohmann::json& value);

}  // namespace ditbatch
