// The `ditbatch` command line: one function per sub-command, each with its own --help.
// Exit status: 0 success, 1 failure at run time, 2 bad input (usage, files, values).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ditbatch {

class Tokenizer;
struct PromptTemplate;

int run_command_line(int argc, char** argv);

// Each takes the arguments after the command name.
int cmd_bench(const std::vector<std::string>& args);
int cmd_convert(const std::vector<std::string>& args);
int cmd_generate(const std::vector<std::string>& args);
int cmd_inspect(const std::vector<std::string>& args);
int cmd_make_tiny(const std::vector<std::string>& args);
int cmd_report(const std::vector<std::string>& args);
int cmd_selftest(const std::vector<std::string>& args);
int cmd_tokenize(const std::vector<std::string>& args);
int cmd_verify(const std::vector<std::string>& args);

// One stdin line of `ditbatch tokenize` (a JSON string, or a jsonl prompt object) -> its output
// line, the ids as "[9707, 1879]\n" ("" for a blank line). With a template the text is wrapped
// first and, with `drop`, the template's leading ids are left out. Errors name the line.
std::string tokenize_stdin_line(Tokenizer& tokenizer, const PromptTemplate* prompt_template, bool drop,
                                const std::string& line, int64_t line_number);

}  // namespace ditbatch
