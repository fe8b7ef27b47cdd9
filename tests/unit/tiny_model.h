// A tiny random pipeline made once per test process with `ditbatch make-tiny` (the model the
// demo, generate, MPI and Slurm tests run), and weight files written from it with changes.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "io/weight_store.h"
#include "test_util.h"

namespace ditbatch::test {

inline const std::string& tiny_model() {
  static std::unique_ptr<TempDir> dir;
  static std::string path;
  if (path.empty()) {
    dir = std::make_unique<TempDir>();
    path = *dir / "tiny.h5";
    auto r = run(exe() + " make-tiny --seed 3 --out " + path);
    if (r.status != 0) ADD_FAILURE() << "make-tiny failed: " << r.output;
  }
  return path;
}

// What a rewrite may change: a root attribute's text, a component's config (JSON text), a
// tensor, a file's bytes.
struct WeightEdits {
  std::function<void(const std::string& attr, std::string& value)> root;
  std::function<void(const std::string& component, std::string& config_json)> config;
  std::function<void(const std::string& component, const std::string& name, Tensor& tensor)> tensor;
  std::function<void(const std::string& name, std::string& bytes)> file;
};

// `from` written again by WeightWriter into `to`, through `edits`: a weight file as a converter
// would write it from a checkpoint that holds those changes (digests and checksums describe
// them), unlike an edit in place.
inline void rewrite_weights(const std::string& from, const std::string& to, const WeightEdits& edits,
                            int64_t format_version = kWeightFormatVersion) {
  const WeightStore in = WeightStore::open(from);
  WeightWriter out(to, format_version);
  for (const char* attr : {"model_name", "source", "pipeline_class", "prompt_template"})
    if (in.root().has_attr(attr)) {
      std::string value = in.root_string(attr);
      if (edits.root) edits.root(attr, value);
      out.set_root_attr(attr, value);
    }
  out.set_root_attr("prompt_template_encode_start_idx", in.root_int("prompt_template_encode_start_idx"));
  for (const std::string& name : in.components()) {
    const Component component = in.component(name);
    std::string config = component.group().has_attr("config_json") ? component.group().attr_string("config_json") : "";
    if (edits.config) edits.config(name, config);
    out.begin_component(name, config);
    for (const std::string& tensor : component.tensor_names()) {
      if (component.tensor_info(tensor).dtype == DType::U8) {
        std::string bytes = component.file_bytes(tensor);
        if (edits.file) edits.file(tensor, bytes);
        out.add_file(tensor, bytes);
      } else {
        Tensor t = component.tensor(tensor);
        if (edits.tensor) edits.tensor(name, tensor, t);
        out.add_tensor(tensor, t.shape(), t.dtype(), t.raw());
      }
    }
    out.end_component();
  }
  out.finish();
}

}  // namespace ditbatch::test
