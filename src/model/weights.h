// Binding a model's weights by their diffusers/transformers names.
//
// Each model lists its tensors once, in a bind function that asks a WeightBinder for every
// (name, shape). Loading binds from a weight-file component (shape checked, with the config
// values that imply it); make-tiny binds with a recorder that collects the specs and fills
// them with random values. One list, so the loader and the tiny models cannot drift apart.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "io/safetensors.h"
#include "io/weight_store.h"

namespace ditbatch {

// How make-tiny fills a tensor: matrices ~ N(0, 1/fan_in), biases small, norm gains ~ 1.
enum class WeightInit { Matrix, Bias, Gain, Embedding };

struct WeightSpec {
  std::string name;
  Shape shape;
  WeightInit init;
  std::string why;  // the config values that imply the shape, for error messages
};

class WeightBinder {
 public:
  virtual ~WeightBinder() = default;
  // Returns the tensor as a host tensor in the dtype it is stored in (f32, bf16 or f16), which
  // the backend converts once when it uploads it: a bf16 file reaches a GPU as bf16, never
  // through an f32 copy. A 16-bit tensor may sit in a buffer the binder reuses for the next
  // one (unless the tensor is still held then): upload or convert it first. A recorder returns
  // an undefined tensor.
  virtual Tensor bind(const std::string& name, const Shape& shape, WeightInit init, const std::string& why) = 0;
  // True when binding only records specs (models then skip preparing device copies).
  virtual bool recording() const { return false; }
};

class SpecRecorder final : public WeightBinder {
 public:
  Tensor bind(const std::string& name, const Shape& shape, WeightInit init, const std::string& why) override {
    specs.push_back({name, shape, init, why});
    return Tensor();
  }
  bool recording() const override { return true; }
  std::vector<WeightSpec> specs;
};

// The specs a model's static bind(binder, backend, config, weights) records, nothing uploaded.
template <typename Config, typename Weights>
std::vector<WeightSpec> recorded_specs(void (*bind)(WeightBinder&, Backend*, const Config&, Weights&),
                                       const Config& config) {
  SpecRecorder recorder;
  Weights unused;
  bind(recorder, nullptr, config, unused);
  return recorder.specs;
}

// Loads from a component of a weight file; `prefix` is prepended to every name.
class ComponentLoader final : public WeightBinder {
 public:
  explicit ComponentLoader(const Component& component, std::string prefix = "")
      : component_(component), prefix_(std::move(prefix)) {}
  Tensor bind(const std::string& name, const Shape& shape, WeightInit, const std::string& why) override {
    return component_.tensor(prefix_ + name, shape, why, &staging_);
  }

 private:
  const Component& component_;
  std::string prefix_;
  ReusedHostBuffer staging_;
};

// Where models read their tensors and files from: the weight file directly (this class), or,
// under MPI, one reader per node that broadcasts to the node's other ranks (src/cluster).
class WeightReader {
 public:
  virtual ~WeightReader() = default;
  // A binder over a component's tensors, names prefixed with `prefix`.
  virtual std::unique_ptr<WeightBinder> binder(const Component& component, const std::string& prefix = "") const {
    return std::make_unique<ComponentLoader>(component, prefix);
  }
  // Every u8 dataset of a component by name (the tokenizer's files).
  virtual std::map<std::string, std::string> files(const Component& component) const;
  // A tensor of a safetensors file outside the weight file (a LoRA's factor), as host fp32.
  virtual Tensor file_tensor(const std::string& path, const std::string& name) const {
    return stored_file_tensor(path, name).to_f32();
  }

 protected:
  // The same in its stored dtype (what a broadcast moves).
  Tensor stored_file_tensor(const std::string& path, const std::string& name) const;

 private:
  mutable std::map<std::string, std::shared_ptr<SafetensorsFile>> open_files_;  // mapped once each
};

// A Linear layer as torch stores it: weight [out, in], bias [out] (may be undefined).
struct Linear {
  Tensor weight;
  Tensor bias;
  Tensor operator()(Backend& be, const Tensor& x) const { return be.linear(x, weight, bias.defined() ? &bias : nullptr); }
  Tensor operator()(Backend& be, const Tensor& x, DType out) const {
    return be.linear(x, weight, bias.defined() ? &bias : nullptr, out);
  }
  // gelu_tanh(x W^T + b) in one op (the fused ops need the bias: every such layer has one).
  Tensor gelu(Backend& be, const Tensor& x) const { return be.linear_gelu(x, weight, bias); }
  // out = x W^T + b, in out's dtype (out: often rows of a larger tensor).
  void into(Backend& be, const Tensor& out, const Tensor& x) const {
    be.linear(x, weight, bias.defined() ? &bias : nullptr, out);
  }
};

// Where a Linear's result goes. Act: the next op's input, in the activation dtype. F32: a
// residual stream or modulation vectors, asked for in f32; the bias is then kept in f32, the
// dtype the GEMM's epilogue adds it in, rather than converted from bf16 on every call. (A bf16
// checkpoint's biases are unchanged by this; an f32 file's keep their f32 precision. Biases
// are small, a few MB in all, so they need no exact-size allocation for offloading.)
enum class LinearOut { Act, F32 };

// A config value that counts numbered blocks of tensors (num_layers: "transformer_blocks.{i}."),
// checked against the blocks a file holds before anything is allocated for them: a config that
// says 10^9 layers would allocate gigabytes for them and die with a bare std::bad_alloc, and 0
// text-encoder layers would ignore the file's.
struct BlockCount {
  std::string config_key;  // "num_layers"
  int64_t value;
  std::string prefix;  // "transformer_blocks.": the blocks are prefix + "{i}."
};
// Throws InputError naming `where`, the key, its value and the blocks the names hold.
void check_block_counts(const std::vector<BlockCount>& counts, const std::vector<std::string>& tensor_names,
                        const std::string& where);

// Binds "<name>.weight" [out, in] and, if with_bias, "<name>.bias" [out]; uploads both.
Linear bind_linear(WeightBinder& binder, Backend* be, const std::string& name, int64_t out, int64_t in,
                   bool with_bias, const std::string& why, LinearOut result = LinearOut::Act);
// Binds a 1-D gain (norm weight) and uploads it.
Tensor bind_vector(WeightBinder& binder, Backend* be, const std::string& name, int64_t n, WeightInit init,
                   const std::string& why);
// Uploads a bound host tensor as a weight (a no-op for a recorder's undefined tensors).
Tensor upload_bound(Backend* be, const Tensor& host);

}  // namespace ditbatch
