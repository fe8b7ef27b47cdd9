#include "io/diffusers_export.h"

#include <cstdio>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "core/fs.h"

namespace fs = std::filesystem;

namespace ditbatch {

namespace {

const char* safetensors_dtype_name(DType dtype, const std::string& where) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    default: fail_input("{}: dtype {} has no place in a diffusers folder", where, dtype_name(dtype));
  }
}

// One .safetensors of every tensor of a component: the header (offsets in name order, padded
// with spaces to 8 bytes, as the format's writers do), then the stored bytes.
int64_t write_safetensors(const Component& component, const std::string& path) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  const std::vector<std::string> names = component.tensor_names();
  for (const std::string& name : names) {
    const h5::DatasetInfo info = component.tensor_info(name);
    const uint64_t bytes = static_cast<uint64_t>(shape_numel(info.shape)) * dtype_size(info.dtype);
    header[name] = {{"dtype", safetensors_dtype_name(info.dtype, component.where(name))},
                    {"shape", info.shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(path.c_str(), "wbx"), std::fclose);
  if (!out) fail_input("{}: cannot create: {}", path, std::strerror(errno));
  const uint64_t header_bytes = text.size();
  bool ok = std::fwrite(&header_bytes, 8, 1, out.get()) == 1 && std::fwrite(text.data(), 1, text.size(), out.get()) == text.size();
  for (const std::string& name : names) {
    if (!ok) break;
    const Tensor t = component.tensor(name);
    ok = t.nbytes() == 0 || std::fwrite(t.raw(), 1, t.nbytes(), out.get()) == t.nbytes();
  }
  if (!ok || std::fclose(out.release()) != 0) fail_input("{}: cannot write (disk full?): {}", path, std::strerror(errno));
  return static_cast<int64_t>(offset);
}

void write_text_file(const std::string& path, const std::string& text) {
  std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(path.c_str(), "wbx"), std::fclose);
  if (!out || std::fwrite(text.data(), 1, text.size(), out.get()) != text.size() || std::fclose(out.release()) != 0)
    fail_input("{}: cannot write: {}", path, std::strerror(errno));
}

}  // namespace

int64_t export_diffusers_folder(const WeightStore& store, const std::string& dir) {
  if (fs::exists(fs::symlink_status(dir))) fail_input("{}: exists; name a folder that does not exist yet", dir);
  fs::create_directories(dir);
  write_text_file(dir + "/model_index.json",
                  nlohmann::ordered_json{{"_class_name", store.root_string("pipeline_class", "QwenImagePipeline")},
                                         {"_name_or_path", store.model_name()}}
                      .dump(2));
  int64_t bytes = 0;
  for (const auto& [name, file] : {std::pair{"transformer", "diffusion_pytorch_model.safetensors"},
                                   std::pair{"text_encoder", "model.safetensors"},
                                   std::pair{"vae", "diffusion_pytorch_model.safetensors"}}) {
    const Component c = store.component(name);
    fs::create_directories(dir + "/" + name);
    write_text_file(dir + "/" + name + "/config.json", c.group().attr_string("config_json"));
    bytes += write_safetensors(c, dir + "/" + name + "/" + file);
  }
  const Component tokenizer = store.component("tokenizer");
  fs::create_directories(dir + "/tokenizer");
  for (const std::string& name : tokenizer.tensor_names())
    write_text_file(dir + "/tokenizer/" + name, tokenizer.file_bytes(name));
  fs::create_directories(dir + "/scheduler");
  write_text_file(dir + "/scheduler/scheduler_config.json",
                  store.component("scheduler").group().attr_string("config_json"));
  return bytes;
}

}  // namespace ditbatch
