// The index of a sharded diffusers component ("*.safetensors.index.json"), as `convert` reads
// it: the weight_map from tensor names to shard files in the same folder.
//
// The folder holds two real shards; the input is the index. Beyond "no crash": every tensor
// the set accepts is one the index assigns to the shard it comes from, and no accepted shard
// lies outside the folder.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "io/safetensors.h"

using namespace ditbatch;

namespace {

// A safetensors file: little-endian header length, JSON header, data (f32 values).
std::string safetensors(const std::vector<std::pair<std::string, Shape>>& tensors) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  std::string body;
  for (const auto& [name, shape] : tensors) {
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * 4;
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {body.size(), body.size() + bytes}}};
    for (size_t i = 0; i < bytes / 4; ++i) {
      const float v = 0.25f * static_cast<float>(i + 1);
      body.append(reinterpret_cast<const char*>(&v), 4);
    }
  }
  const std::string text = header.dump();
  const uint64_t length = text.size();
  return std::string(reinterpret_cast<const char*>(&length), 8) + text + body;
}

const fuzz::ScratchDir& folder() {
  static const fuzz::ScratchDir dir;
  static const bool written = [] {
    dir.write("model-00001-of-00002.safetensors",
              safetensors({{"img_in.weight", {4, 2}}, {"img_in.bias", {4}}, {"norm_out.linear.weight", {2, 2}}}));
    dir.write("model-00002-of-00002.safetensors", safetensors({{"proj_out.weight", {2, 4}}, {"proj_out.bias", {2}}}));
    return true;
  }();
  (void)written;
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::ScratchDir& dir = folder();
  const std::string index_path = dir.write("model.safetensors.index.json", fuzz::as_text(data, size));
  fuzz::parse([&] {
    const SafetensorsSet set = SafetensorsSet::open_index(index_path);
    const nlohmann::json index = nlohmann::json::parse(fuzz::as_text(data, size));
    for (const auto& item : set.items()) {
      const std::filesystem::path shard(item.file->path());
      if (shard.parent_path() != std::filesystem::path(dir.path()))
        fuzz::finding("accepted a shard outside the index's folder: " + item.file->path());
      const auto& assigned = index.at("weight_map").at(item.entry->name);
      if (assigned != shard.filename().string())
        fuzz::finding("tensor '" + item.entry->name + "' taken from " + shard.filename().string() +
                      ", but the index assigns it to " + assigned.dump());
    }
    (void)set.total_bytes();
  });
  return 0;
}
