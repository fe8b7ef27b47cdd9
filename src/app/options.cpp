#include "app/options.h"

#include <iostream>

#include "core/error.h"

namespace ditbatch {

bool parse_options(const std::string& command, const std::string& synopsis, const std::string& about,
                   po::options_description& desc, const po::positional_options_description* positional,
                   const std::vector<std::string>& args, po::variables_map& vm) {
  desc.add_options()("help,h", "show this help");
  try {
    po::command_line_parser parser(args);
    parser.options(desc);
    if (positional) parser.positional(*positional);
    po::store(parser.run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: ditbatch " << command << " " << synopsis << "\n\n" << about << "\n\n" << desc << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    fail_input("{} (see ditbatch {} --help)", e.what(), command);
  }
  return true;
}

}  // namespace ditbatch
