// The lines `ditbatch tokenize` reads on stdin (a JSON string, or a jsonl prompt object, per
// line) through the real Qwen2.5-VL tokenizer (weights/tokenizer): the JSON, then NFC, the
// pre-tokenizer regex and BPE on whatever text the JSON holds, plain and with the prompt
// template and --drop, as tokenize_stdin_line does for each line.
//
// Beyond "no crash": every printed line is a list of ids of the vocabulary.
#include <string_view>

#include "app/commands.h"
#include "fuzz_util.h"
#include "model/prompt_tokens.h"
#include "model/tokenizer.h"

using namespace ditbatch;

namespace {

void check_output(const std::string& out, const Tokenizer& tokenizer) {
  if (out.empty()) return;
  if (out.front() != '[' || !out.ends_with("]\n")) fuzz::finding("tokenize printed \"" + out + "\", not an id list");
  const std::string_view body(out.data() + 1, out.size() - 3);
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t comma = body.find(", ", pos);
    const std::string number(body.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
    const long long id = std::stoll(number);
    if (id < 0 || id >= tokenizer.vocab_size())
      fuzz::finding("tokenize printed id " + number + ", not in the vocabulary");
    if (comma == std::string_view::npos) break;
    pos = comma + 2;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Tokenizer tokenizer = Tokenizer::from_folder(fuzz::source_path("weights/tokenizer"));
  static const PromptTemplate prompt_template;  // the built-in Qwen-Image template, as for a folder
  const std::string_view input = fuzz::as_text(data, size);
  // Lines as getline() cuts stdin: each with its '\n', the last one possibly without.
  int64_t line_number = 0;
  for (size_t start = 0; start < input.size();) {
    const size_t newline = input.find('\n', start);
    const size_t end = newline == std::string_view::npos ? input.size() : newline + 1;
    const std::string line(input.substr(start, end - start));
    start = end;
    ++line_number;
    for (const PromptTemplate* tmpl : {static_cast<const PromptTemplate*>(nullptr), &prompt_template})
      fuzz::parse(
          [&] { check_output(tokenize_stdin_line(tokenizer, tmpl, tmpl != nullptr, line, line_number), tokenizer); });
  }
  return 0;
}
