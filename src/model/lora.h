// LoRA adapters for a transformer (its linears, as LoraTargets lists them), read as diffusers
// 0.42.1 reads them (QwenImagePipeline.load_lora_weights: lora_state_dict, _convert_non_diffusers_qwen_lora_to_diffusers,
// then PEFT's LoraConfig): every key format is mapped onto the diffusers module names, each
// module's factors are checked against the module's weight, every value is checked finite and the
// scale s * alpha / rank is worked out, all before any weight is read. lora_merge.h merges the set
// into the weights as they load.
//
// Key formats (told apart per key, so any mix of them works, as diffusers' converter allows):
//   transformer.<module>.lora_A.weight / .lora_B.weight   diffusers / PEFT (also without the prefix,
//   <module>.alpha                                       and with PEFT's adapter infix
//                                                        lora_A.default.weight)
//   lora_unet_<flattened module>.lora_down.weight / .lora_up.weight / .alpha          Kohya
//   diffusion_model.<module>.lora_down.weight / .lora_up.weight / .alpha    ComfyUI, LightX2V
// alpha: the module's scale is alpha / rank (1 without an alpha). A file saved by diffusers may
// hold its LoraConfig in the safetensors metadata ("lora_adapter_metadata"): its lora_alpha / r
// (alpha_pattern, rank_pattern, use_rslora) scales the modules too, as PEFT does.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "model/weights.h"

namespace ditbatch {

// What a LoRA may change: a transformer's linears (every 2-D ".weight" of its weight list, by its
// diffusers module name) and, for messages, what the model is.
struct LoraTargets {
  std::string model;          // "this Qwen-Image transformer (60 blocks, inner dim 3072)"
  int64_t num_layers = 0;     // its transformer_blocks
  std::vector<WeightSpec> weights;
};

// One --lora FILE[:STRENGTH] (strength 1 by default).
struct LoraRequest {
  std::string path;
  double strength = 1.0;
};
// "style.safetensors:0.7" -> {path, 0.7}. A path that names an existing file is taken whole (a
// ':' in a file name); otherwise the text after the last ':' must be a finite number.
LoraRequest parse_lora_argument(const std::string& text);

struct LoraFile {
  std::string path, name;  // name: the file name, as the PNG and the manifest record it
  std::string sha256;
  double strength = 1.0;
  std::string formats;      // the key formats it holds, for the log: "kohya (lora_unet_)"
  int64_t modules = 0;      // modules it changes
};

// One module's change from one file: W += scale * up @ down.
struct LoraPatch {
  size_t file = 0;                // index into LoraSet::files()
  std::string down_key, up_key;   // the file's tensors: down [rank, in], up [out, rank]
  int64_t rank = 0;
  double scale = 1.0;             // strength * alpha / rank (* the metadata's lora_alpha / r)
};

class LoraSet {
 public:
  LoraSet() = default;
  // Reads and checks every file against the targets' linears. Throws
  // InputError naming the file and the key: a file missing or truncated, keys of no format, a
  // key whose module the model lacks (or none matching: a LoRA for another model), a factor whose
  // shape does not fit its module, a non-finite value.
  static LoraSet open(const std::vector<LoraRequest>& requests, const LoraTargets& targets);

  bool empty() const { return files_.empty(); }
  // In the order given on the command line.
  const std::vector<LoraFile>& files() const { return files_; }
  // Module name ("transformer_blocks.0.attn.to_q") -> its patches, in merge order: the files
  // sorted by (sha256, strength), so the order of --lora options does not change a bit.
  const std::map<std::string, std::vector<LoraPatch>>& patches() const { return patches_; }
  int64_t patch_count() const;

  // The whole set, for the other ranks (rebuilt without reading any file again).
  std::string to_json() const;
  static LoraSet from_json(const std::string& json);
  // What an image records: [{"file": name, "sha256": ..., "strength": ...}] in command-line order.
  nlohmann::json provenance() const;

 private:
  std::vector<LoraFile> files_;
  std::map<std::string, std::vector<LoraPatch>> patches_;
};

// The same set of LoRAs, whatever the order (what the resume check compares): sha256 and
// strength of each entry of provenance(), sorted. Empty for no LoRA.
std::string lora_set_key(const nlohmann::json& provenance);

}  // namespace ditbatch
