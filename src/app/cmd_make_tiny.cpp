#include "app/commands.h"
#include "app/options.h"
#include "convert/tiny_pipeline.h"

namespace ditbatch {

int cmd_make_tiny(const std::vector<std::string>& args) {
  TinyPipelineOptions opt;
  std::string seed_text;  // parsed here: Boost reads "-1" into an unsigned as 2^64 - 1
  po::options_description desc("options");
  desc.add_options()
      ("out", po::value(&opt.out)->required(), "the .h5 to write")
      ("model", po::value(&opt.model)->default_value("qwen-image"), "the family: qwen-image | qwen-image-2.1 | qwen-image-edit | qwen-image-edit-2509 | qwen-image-edit-2511")
      ("seed", po::value(&seed_text)->default_value("0"), "random seed (the same seed writes the same file)")
      ("tokenizer", po::value(&opt.tokenizer_dir), "tokenizer folder to embed (default: weights/tokenizer)");
  po::variables_map vm;
  if (!parse_options("make-tiny", "--out FILE.h5 [--model qwen-image-2.1] [--seed N]",
                     "Writes a tiny random pipeline of a family (Qwen-Image by default, Qwen-Image-2.1, or an Edit\n"
                     "family, which takes input images): the real architecture with small dimensions and the real\n"
                     "Qwen2.5-VL tokenizer. It draws noise-like pictures; it exists for tests and the demo.",
                     desc, nullptr, args, vm))
    return 0;
  opt.seed = parse_seed(seed_text, "--seed");
  make_tiny_pipeline(opt, Log());
  return 0;
}

}  // namespace ditbatch
