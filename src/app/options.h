// Shared Boost.ProgramOptions plumbing for the sub-commands.
#pragma once

#include <boost/program_options.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ditbatch {

namespace po = boost::program_options;

// Parses args against desc (and positionals); returns false if --help was printed.
// Unknown options and bad values throw InputError naming the option.
bool parse_options(const std::string& command, const std::string& synopsis, const std::string& about,
                   po::options_description& desc, const po::positional_options_description* positional,
                   const std::vector<std::string>& args, po::variables_map& vm);

// A seed option's value as written: 0..2^64-1 (Boost alone reads "-1" into an unsigned as
// 2^64 - 1). Throws InputError naming the option.
uint64_t parse_seed(const std::string& text, const std::string& option);

// The one positional argument of a command that reads an output folder (report, verify): DIR,
// parsed; false if --help was printed. Throws InputError unless DIR is a folder that holds a
// generate run's manifest.
bool parse_output_folder(const std::string& command, const std::string& about, const std::vector<std::string>& args,
                         std::string& out_dir);

}  // namespace ditbatch
