#include "pipeline/image_model.h"

#include <functional>

#include "core/error.h"
#include "pipeline/qwen_image_21_model.h"
#include "pipeline/qwen_image_edit_model.h"
#include "pipeline/qwen_image_model.h"

namespace ditbatch {
namespace {

struct Family {
  const char* pipeline_class;
  std::function<std::unique_ptr<ImageModel>(const WeightStore&)> open;
};

// Every family ditbatch runs, by the pipeline class of its diffusers folder.
const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      {"QwenImagePipeline", [](const WeightStore& w) { return std::make_unique<QwenImageModel>(w); }},
      {"QwenImage21Pipeline", [](const WeightStore& w) { return std::make_unique<QwenImage21Model>(w); }},
      {"QwenImageEditPipeline", [](const WeightStore& w) { return std::make_unique<QwenImageEditModel>(w); }},
      {"QwenImageEditPlusPipeline", [](const WeightStore& w) { return std::make_unique<QwenImageEditModel>(w); }},
  };
  return table;
}

}  // namespace

std::vector<std::string> ImageModel::pipeline_classes() {
  std::vector<std::string> names;
  for (const Family& f : families()) names.emplace_back(f.pipeline_class);
  return names;
}

std::unique_ptr<ImageModel> ImageModel::open(const WeightStore& weights) {
  // Files written before convert recorded the class hold Qwen-Image, the only family then.
  const std::string pipeline_class = weights.root_string("pipeline_class", "QwenImagePipeline");
  for (const Family& f : families())
    if (pipeline_class == f.pipeline_class) return f.open(weights);
  std::string known;
  for (const std::string& name : pipeline_classes()) known += (known.empty() ? "" : ", ") + name;
  fail_input("{}: pipeline class '{}': ditbatch runs {}", weights.path(), pipeline_class, known);
}

}  // namespace ditbatch
