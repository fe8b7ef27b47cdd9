#include "app/commands.h"

#include <cstdio>
#include <exception>
#include <iostream>
#include <map>

#include "app/backends.h"
#include "cluster/decide_on_rank0.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/install_paths.h"

namespace ditbatch {

namespace {

struct CommandInfo {
  int (*run)(const std::vector<std::string>&);
  const char* summary;
};

const std::map<std::string, CommandInfo>& commands() {
  static const std::map<std::string, CommandInfo> table = {
      {"bench", {cmd_bench, "time the transformer (or VAE, text encoder) on random inputs"}},
      {"convert", {cmd_convert, "turn a Hugging Face diffusers folder into a ditbatch .h5"}},
      {"generate", {cmd_generate, "make one PNG per prompt (the main job)"}},
      {"inspect", {cmd_inspect, "show what a ditbatch .h5 holds"}},
      {"make-tiny", {cmd_make_tiny, "write a tiny random Qwen-Image pipeline (tests, demo)"}},
      {"report", {cmd_report, "write DIR/report.html: gallery, failed images, timeline per rank"}},
      {"selftest", {cmd_selftest, "check that this node's backend can be trusted (ops, paths, pipeline, speed)"}},
      {"tokenize", {cmd_tokenize, "print the token ids of prompts (JSON lines on stdin)"}},
      {"verify", {cmd_verify, "hash every image an output folder's manifest lists; name those that changed"}},
  };
  return table;
}

void print_usage() {
  std::cout << "ditbatch " << DITBATCH_VERSION << " (" << build_commit()
            << "): batch text-to-image with Qwen-Image\n\nusage: ditbatch <command> [options]   (ditbatch <command> "
               "--help for its options)\n\ncommands:\n";
  for (const auto& [name, info] : commands()) std::printf("  %-12s %s\n", name.c_str(), info.summary);
}

}  // namespace

int run_command_line(int argc, char** argv) {
  if (argc < 2) {
    print_usage();
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage();
    return 0;
  }
  if (name == "--version") {
    std::cout << "ditbatch " << DITBATCH_VERSION << " " << build_commit() << "\n"
              << gpu_support_report() << "installed at: " << executable_path() << "\n";
    return 0;
  }
  auto it = commands().find(name);
  if (it == commands().end()) {
    std::cerr << "ditbatch: unknown command '" << name << "'\n";
    print_usage();
    return 2;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  try {
    return it->second.run(args);
  } catch (const std::exception& e) {
    // Said once per job: an error rank 0 reported ends the other ranks without a word.
    if (!reported_by_rank0(e)) std::cerr << "ditbatch " << name << ": error: " << e.what() << "\n";
    return dynamic_cast<const InputError*>(&e) ? 2 : 1;
  }
}

}  // namespace ditbatch
