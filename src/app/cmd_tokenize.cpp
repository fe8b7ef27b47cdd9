// `ditbatch tokenize`: prompts in (one JSON string per line), token ids out (one JSON array per
// line), so a user can see exactly what the text encoder will get.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "app/commands.h"
#include "io/json_text.h"
#include "app/options.h"
#include "core/error.h"
#include "io/weight_store.h"
#include "model/prompt_tokens.h"
#include "model/tokenizer.h"

namespace ditbatch {

namespace {

// Python's repr of a list of ints ("[9707, 1879]"), so the output diffs cleanly against
// `print(tokenizer(text).input_ids)`.
void append_id_array(std::string& out, const std::vector<int64_t>& ids, size_t first) {
  out += '[';
  for (size_t i = first; i < ids.size(); ++i) {
    if (i > first) out += ", ";
    out += std::to_string(ids[i]);
  }
  out += "]\n";
}

// stdin line by line (POSIX getline: fast, and a line may hold any byte).
class StdinLines {
 public:
  StdinLines() = default;
  StdinLines(const StdinLines&) = delete;
  StdinLines& operator=(const StdinLines&) = delete;
  ~StdinLines() { std::free(buffer_); }

  bool next(std::string& line) {
    const ssize_t length = ::getline(&buffer_, &capacity_, stdin);
    if (length < 0) return false;
    line.assign(buffer_, static_cast<size_t>(length));
    ++number_;
    return true;
  }
  int64_t number() const { return number_; }

 private:
  char* buffer_ = nullptr;
  size_t capacity_ = 0;
  int64_t number_ = 0;
};

std::string parse_prompt_line(const std::string& line, int64_t line_number) {
  nlohmann::json value;
  try {
    value = parse_json(line);
  } catch (const nlohmann::json::exception& e) {  // out_of_range too: a number past a double (1e708)
    fail_input("stdin line {}: not a JSON string (write each prompt as \"...\" on its own line): {}", line_number,
               e.what());
  }
  // A .jsonl prompt file's lines too: their "prompt" is what generate tokenizes.
  if (value.is_object() && value.contains("prompt") && value["prompt"].is_string())
    return value["prompt"].get<std::string>();
  if (!value.is_string())
    fail_input("stdin line {}: found a JSON {}, expected a string or an object with a \"prompt\" string (write each "
               "prompt as \"...\" on its own line)",
               line_number, value.type_name());
  return value.get<std::string>();
}

}  // namespace

std::string tokenize_stdin_line(Tokenizer& tokenizer, const PromptTemplate* prompt_template, bool drop,
                                const std::string& line, int64_t line_number) {
  std::string output;
  if (line.find_first_not_of(" \t\r\n") == std::string::npos) return output;  // blank, as in a prompt file
  try {
    const std::string text = parse_prompt_line(line, line_number);
    if (prompt_template) {
      // max_sequence_length does not matter here: --drop prints every kept id, up to 1024.
      const PromptTokens tokens = tokenize_prompt(tokenizer, text, *prompt_template, kQwenImageTokenizerMaxLength);
      append_id_array(output, tokens.ids, drop ? static_cast<size_t>(tokens.keep_first) : 0);
    } else {
      append_id_array(output, tokenizer.encode(text), 0);
    }
  } catch (const InputError& e) {
    // Errors from the tokenizer or the template do not know the line; add it.
    const std::string message = e.what();
    if (message.starts_with("stdin line ")) throw;
    fail_input("stdin line {}: {}", line_number, message);
  }
  return output;
}

int cmd_tokenize(const std::vector<std::string>& args) {
  std::string tokenizer_path;
  bool use_template = false;
  bool drop = false;
  po::options_description desc("options");
  // clang-format off
  desc.add_options()
      ("tokenizer", po::value(&tokenizer_path)->required(), "a tokenizer folder or a ditbatch .h5")
      ("template", po::bool_switch(&use_template), "wrap each text in the Qwen-Image prompt template")
      ("drop", po::bool_switch(&drop), "with --template: also drop the template's leading ids, as the pipeline does");
  // clang-format on
  po::variables_map vm;
  if (!parse_options("tokenize", "--tokenizer PATH [--template] [--drop] < prompts.jsonl",
                     "Reads JSON strings (or a .jsonl prompt file's objects: their \"prompt\"), one per line, on\n"
                     "stdin and prints the token ids of each as a JSON array, one per line (blank lines skipped). With --template each text is first wrapped in the Qwen-Image template (from the\n"
                     ".h5's root attributes, or the built-in one for a folder) and tokenized whole, cut to 1024 +\n"
                     "drop ids; --drop then removes the first drop (34) ids: the ids whose encoder rows become\n"
                     "prompt_embeds (before the max_sequence_length cut).",
                     desc, nullptr, args, vm))
    return 0;
  if (drop && !use_template) fail_input("--drop needs --template (it drops the template's ids)");

  const bool is_folder = std::filesystem::is_directory(tokenizer_path);
  if (!is_folder && !std::filesystem::exists(tokenizer_path))
    fail_input("--tokenizer {}: no such folder or file", tokenizer_path);
  std::optional<WeightStore> store;
  if (!is_folder) store.emplace(WeightStore::open(tokenizer_path));
  Tokenizer tokenizer = is_folder ? Tokenizer::from_folder(tokenizer_path) : Tokenizer::from_weights(*store);
  const PromptTemplate prompt_template = store ? PromptTemplate::from_weights(*store) : PromptTemplate{};

  StdinLines lines;
  std::string line;
  while (lines.next(line)) {
    const std::string output =
        tokenize_stdin_line(tokenizer, use_template ? &prompt_template : nullptr, drop, line, lines.number());
    // One flush per line: an interactive user (or a coprocess) sees each answer at once.
    std::fwrite(output.data(), 1, output.size(), stdout);
    std::fflush(stdout);
  }
  if (std::ferror(stdin)) fail("reading stdin failed");
  return 0;
}

}  // namespace ditbatch
