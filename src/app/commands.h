// The `ditbatch` command line: one function per sub-command, each with its own --help.
// Exit status: 0 success, 1 failure at run time, 2 bad input (usage, files, values).
#pragma once

#include <string>
#include <vector>

namespace ditbatch {

int run_command_line(int argc, char** argv);

// Each takes the arguments after the command name.
int cmd_bench(const std::vector<std::string>& args);
int cmd_convert(const std::vector<std::string>& args);
int cmd_generate(const std::vector<std::string>& args);
int cmd_inspect(const std::vector<std::string>& args);
int cmd_make_tiny(const std::vector<std::string>& args);
int cmd_selftest(const std::vector<std::string>& args);
int cmd_tokenize(const std::vector<std::string>& args);

}  // namespace ditbatch
