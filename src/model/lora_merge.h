// Merging a LoraSet into the transformer's weights as they load: W' = W + sum of scale * up @ down,
// in fp32 on the host, before the weight is uploaded (and rounded once to the backend's weight
// dtype). A binder decorator, so it composes with any weight source (the file, the node
// broadcast, random weights) and runs before anything uses the weight: img_mod / txt_mod are
// merged before the conditioning computed at load reads them. No cost per step.
#pragma once

#include "model/lora.h"
#include "model/weights.h"

namespace ditbatch {

// weight [out, in] += scale * up [out, rank] @ down [rank, in], all host fp32 (one OpenBLAS sgemm).
void add_lora_delta(Tensor& weight, const Tensor& up, const Tensor& down, double scale);

class LoraMergingBinder final : public WeightBinder {
 public:
  // The factors come from `reader` (under MPI: read once per node and broadcast).
  LoraMergingBinder(WeightBinder& base, const LoraSet& loras, const WeightReader& reader)
      : base_(base), loras_(loras), reader_(reader) {}
  Tensor bind(const std::string& name, const Shape& shape, WeightInit init, const std::string& why) override;
  bool recording() const override { return base_.recording(); }

  // After the model bound its weights: every patch found its module (a LoRA set checked against
  // this model's config always does; anything else is a bug, not a silently ignored adapter).
  void check_all_merged() const;
  int64_t merged_modules() const { return merged_modules_; }
  int64_t merged_params() const { return merged_params_; }  // elements of the weights changed
  double seconds() const { return seconds_; }                // reading the factors and merging

 private:
  WeightBinder& base_;
  const LoraSet& loras_;
  const WeightReader& reader_;
  int64_t merged_modules_ = 0, merged_params_ = 0, merged_patches_ = 0;
  double seconds_ = 0;
};

}  // namespace ditbatch
