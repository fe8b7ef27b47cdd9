#include "model/lora_merge.h"

#include <cblas.h>
#include <fmt/ranges.h>

#include <cmath>

#include "core/error.h"
#include "core/timer.h"

namespace ditbatch {

void add_lora_delta(Tensor& weight, const Tensor& up, const Tensor& down, double scale) {
  DITBATCH_CHECK(weight.device() == Device::Host && weight.dtype() == DType::F32 && weight.rank() == 2 &&
                     up.dtype() == DType::F32 && down.dtype() == DType::F32 && up.rank() == 2 && down.rank() == 2 &&
                     up.dim(0) == weight.dim(0) && down.dim(1) == weight.dim(1) && up.dim(1) == down.dim(0),
                 "add_lora_delta: weight {}, up {}, down {} (expected [out, in], [out, r], [r, in], host f32)",
                 weight.describe(), up.describe(), down.describe());
  const int out = static_cast<int>(weight.dim(0)), in = static_cast<int>(weight.dim(1)), rank = static_cast<int>(up.dim(1));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, out, in, rank, static_cast<float>(scale), up.data<float>(),
              rank, down.data<float>(), in, 1.0f, weight.data<float>(), in);
}

Tensor LoraMergingBinder::bind(const std::string& name, const Shape& shape, WeightInit init, const std::string& why) {
  Tensor weight = base_.bind(name, shape, init, why);
  if (!weight.defined() || !name.ends_with(".weight")) return weight;
  const auto it = loras_.patches().find(name.substr(0, name.size() - 7));
  if (it == loras_.patches().end()) return weight;
  Stopwatch watch;
  if (weight.dtype() != DType::F32) weight = weight.to_f32();  // the merge adds in f32, as diffusers' fuse_lora
  for (const LoraPatch& patch : it->second) {
    const std::string& path = loras_.files()[patch.file].path;
    add_lora_delta(weight, reader_.file_tensor(path, patch.up_key), reader_.file_tensor(path, patch.down_key),
                   patch.scale);
    ++merged_patches_;
  }
  // Factors near the float range, or a strength of 1e39, pass every check of the files alone but
  // make the merged weight Inf or NaN: said now, naming the LoRAs, not after denoising as NaN
  // images blamed on the weights.
  const float* w = weight.data<float>();
  for (int64_t i = 0; i < weight.numel(); ++i)
    if (!std::isfinite(w[i])) {
      std::vector<std::string> sources;
      for (const LoraPatch& patch : it->second) {
        const LoraFile& file = loras_.files()[patch.file];
        sources.push_back(fmt::format("{} (strength {}, scale {:g})", file.path, file.strength, patch.scale));
      }
      fail_input("{}: merging {} into it gives {} at element {} of {}: the LoRA's factors or strength are too large "
                 "for float32",
                 name, fmt::join(sources, " and "), std::isnan(w[i]) ? "NaN" : "Inf", i, weight.numel());
    }
  ++merged_modules_;
  merged_params_ += weight.numel();
  seconds_ += watch.seconds();
  return weight;
}

void LoraMergingBinder::check_all_merged() const {
  DITBATCH_CHECK(merged_patches_ == loras_.patch_count(),
                 "LoRA merge: {} of {} module patches were merged: the model did not bind every module the LoRA set "
                 "names (a ditbatch bug; please report it with the LoRA files)",
                 merged_patches_, loras_.patch_count());
}

}  // namespace ditbatch
