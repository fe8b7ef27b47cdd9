// Prompt input: --prompt TEXT (repeatable) or --prompts FILE, where FILE is
//   .txt    one prompt per line; blank lines and lines starting with '#' are skipped;
//   .jsonl  one JSON object per line: "prompt" (required) and optional "negative_prompt",
//           "seed", "width", "height", "steps", "cfg", "name", "image"; any other key is an
//           error. "image" is a path or a list of paths (the input images of an edit model),
//           relative to the prompt file's folder or absolute.
// The whole file is validated before anything else happens; errors name file:line and field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ditbatch {

// The ranges a prompt's settings must lie in (pipeline/job.cpp checks them; a number too large
// for an integer is refused here, with the same range).
inline constexpr int64_t kMinImageSide = 16, kMaxImageSide = 8192;  // 4x the model card's largest
inline constexpr int64_t kMinSteps = 2, kMaxSteps = 1000;

struct PromptEntry {
  std::string prompt;
  // As in diffusers: a negative prompt (even "") runs true CFG when cfg > 1; "negative_prompt":
  // null is diffusers' None, no negative prompt and so no CFG; absent, the run's default.
  std::optional<std::string> negative_prompt;
  bool no_negative_prompt = false;  // "negative_prompt": null
  std::optional<uint64_t> seed;
  std::optional<int64_t> width, height, steps;
  std::optional<double> cfg;
  std::optional<std::string> name;
  // The input images: each path as the line gives it, and the file it names (a relative path
  // taken from the prompt file's folder).
  std::vector<std::string> images, image_files;
  std::string origin;  // "prompts.jsonl:12" or "--prompt #2", for messages
};

// Reads and validates a .txt or .jsonl prompt file (any other extension is an error).
std::vector<PromptEntry> read_prompt_file(const std::string& path);
// Parses prompt file contents; `name` is used in messages and decides the format by extension.
std::vector<PromptEntry> parse_prompt_text(const std::string& contents, const std::string& name);

}  // namespace ditbatch
