#include "app/commands.h"
#include "app/options.h"
#include "convert/convert.h"

namespace ditbatch {

int cmd_convert(const std::vector<std::string>& args) {
  ConvertOptions opt;
  std::string log_level;
  po::options_description desc("options");
  desc.add_options()
      ("from", po::value(&opt.from)->required(), "the diffusers folder (model_index.json, transformer/, ...)")
      ("to", po::value(&opt.to)->required(), "the .h5 to write (written to a temporary name, renamed at the end)")
      ("dtype", po::value(&opt.dtype)->default_value("keep"), "keep | bf16 | fp16 | fp32")
      ("model-name", po::value(&opt.model_name), "name stored in the file (default: from model_index.json)")
      ("log-level", po::value(&log_level)->default_value("info"), "debug | info | warn | error");
  po::variables_map vm;
  if (!parse_options("convert", "--from DIFFUSERS_DIR --to FILE.h5 [--dtype keep|bf16|fp32]",
                     "Converts a Qwen-Image diffusers folder into one ditbatch weight file, tensor by tensor.\n"
                     "Vision-tower and LM-head tensors of the text encoder are skipped (text-only use).",
                     desc, nullptr, args, vm))
    return 0;
  convert_diffusers(opt, Log(0, 1, log_level));
  return 0;
}

}  // namespace ditbatch
