// A model component's metadata against what the model binds, as `convert` checks a diffusers
// folder before writing anything (check_component_tensors): config.json (the same text a
// weight file keeps as config_json and `generate` validates), every tensor's name, dtype and
// shape from the safetensors header, and the tensor list the config makes the model bind.
// Built once per component (DITBATCH_FUZZ_COMPONENT: transformer, text_encoder, vae).
//
// The input holds two files (fuzz_util.h): ">>> config.json" and ">>> model.safetensors", the
// latter usually a real header with its data left out; the file is extended with a hole to the
// length the header asks for (at most 64 MiB), so shapes and offsets decide, not the bytes.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "fuzz_util.h"
#include "convert/convert.h"
#include "io/safetensors.h"

using namespace ditbatch;

namespace {

constexpr uint64_t kMaxDataBytes = uint64_t{64} << 20;

// The header's largest end offset, found without the reader under test: a plain scan for
// "data_offsets":[a,b] pairs (a wrong guess only makes the file too short, which the reader
// must refuse anyway).
uint64_t claimed_data_bytes(std::string_view header) {
  uint64_t most = 0;
  for (size_t pos = header.find("\"data_offsets\""); pos != std::string_view::npos;
       pos = header.find("\"data_offsets\"", pos + 1)) {
    const size_t comma = header.find(',', pos);
    if (comma == std::string_view::npos) break;
    uint64_t value = 0;
    for (size_t i = comma + 1; i < header.size() && value <= kMaxDataBytes; ++i) {
      const char c = header[i];
      if (c == ' ') continue;
      if (c < '0' || c > '9') break;
      value = value * 10 + static_cast<uint64_t>(c - '0');
    }
    most = std::max(most, std::min(value, kMaxDataBytes));
  }
  return most;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fuzz::ScratchDir folder;
  static const std::string component = DITBATCH_FUZZ_COMPONENT;
  static const bool made = std::filesystem::create_directory(folder / component);
  (void)made;
  auto files = fuzz::split_files(fuzz::as_text(data, size));
  const std::string& st = files["model.safetensors"];
  const std::string st_path = folder.write(component + "/diffusion_pytorch_model.safetensors", st);
  if (st.size() >= 8) {
    uint64_t header_length = 0;
    std::memcpy(&header_length, st.data(), 8);
    if (header_length <= st.size() - 8) {
      const uint64_t length = 8 + header_length + claimed_data_bytes(std::string_view(st).substr(8, header_length));
      if (length > st.size() && ::truncate(st_path.c_str(), static_cast<off_t>(length)) != 0)
        fuzz::finding("cannot extend the scratch safetensors file");
    }
  }
  const std::string config_path = folder / (component + "/config.json");
  fuzz::parse([&] {
    const SafetensorsSet tensors = SafetensorsSet::open_dir(folder / component);
    check_component_tensors(component, config_path, files["config.json"], tensors, folder.path());
  });
  return 0;
}
