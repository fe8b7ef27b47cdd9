#include "cluster/node_weights.h"

#include <cstring>
#include <sstream>

#include "core/error.h"

namespace ditbatch {

namespace {

// Every call is collective over the node: all ranks bind the same tensors in the same order
// (the same model code over the same config). The reader sends a status first, so a bad tensor
// on the reader becomes the same clear error on every rank of the node.
class NodeBroadcastBinder final : public WeightBinder {
 public:
  NodeBroadcastBinder(const World& world, const Component& component, std::string prefix)
      : world_(world), component_(component), prefix_(std::move(prefix)) {}

  Tensor bind(const std::string& name, const Shape& shape, WeightInit, const std::string& why) override {
    const bool reader = world_.local_rank() == 0;
    Tensor t;
    std::string error;
    if (reader) {
      try {
        t = component_.tensor(prefix_ + name, shape, why, &staging_);
      } catch (const Error& e) {
        error = e.what();
      }
    }
    error = world_.node_broadcast(error);
    if (!error.empty()) fail_input("{}", error);
    // The stored dtype travels with the bytes (bf16 files move half the bytes of f32).
    std::string dtype = world_.node_broadcast(reader ? std::string(dtype_name(t.dtype())) : std::string());
    if (!reader) {
      const DType stored = parse_dtype(dtype);
      t = stored == DType::F32 ? Tensor::host(shape, stored) : staging_.take(shape, stored);
    }
    world_.node_broadcast_inplace(t.raw(), t.nbytes());
    return t;
  }

 private:
  const World& world_;
  const Component& component_;
  std::string prefix_;
  ReusedHostBuffer staging_;  // 16-bit tensors: converted or copied by the backend at once
};

// name\0size\0bytes... : the files of a component in one buffer.
std::string pack_files(const std::map<std::string, std::string>& files) {
  std::string out;
  for (const auto& [name, bytes] : files) out += name + '\0' + std::to_string(bytes.size()) + '\0' + bytes;
  return out;
}

std::map<std::string, std::string> unpack_files(const std::string& packed) {
  std::map<std::string, std::string> files;
  size_t pos = 0;
  while (pos < packed.size()) {
    const size_t name_end = packed.find('\0', pos);
    const size_t size_end = packed.find('\0', name_end + 1);
    const size_t size = std::stoull(packed.substr(name_end + 1, size_end - name_end - 1));
    files[packed.substr(pos, name_end - pos)] = packed.substr(size_end + 1, size);
    pos = size_end + 1 + size;
  }
  return files;
}

}  // namespace

Tensor NodeWeightReader::file_tensor(const std::string& path, const std::string& name) const {
  const bool reader = world_.local_rank() == 0;
  Tensor t;
  std::string error, header;  // "dtype d0 d1 ..." of the stored tensor
  if (reader) {
    try {
      t = stored_file_tensor(path, name);
      header = dtype_name(t.dtype());
      for (int64_t d : t.shape()) header += fmt::format(" {}", d);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  error = world_.node_broadcast(error);
  if (!error.empty()) fail_input("{}", error);
  header = world_.node_broadcast(header);
  if (!reader) {
    std::istringstream in(header);
    std::string dtype;
    in >> dtype;
    Shape shape;
    for (int64_t d; in >> d;) shape.push_back(d);
    t = Tensor::host(shape, parse_dtype(dtype));
  }
  world_.node_broadcast_inplace(t.raw(), t.nbytes());
  return t.to_f32();
}

std::unique_ptr<WeightBinder> NodeWeightReader::binder(const Component& component, const std::string& prefix) const {
  return std::make_unique<NodeBroadcastBinder>(world_, component, prefix);
}

std::map<std::string, std::string> NodeWeightReader::files(const Component& component) const {
  std::string packed, error;
  if (world_.local_rank() == 0) {
    try {
      packed = pack_files(WeightReader::files(component));
    } catch (const Error& e) {
      error = e.what();
    }
  }
  error = world_.node_broadcast(error);
  if (!error.empty()) fail_input("{}", error);
  return unpack_files(world_.node_broadcast(packed));
}

}  // namespace ditbatch
