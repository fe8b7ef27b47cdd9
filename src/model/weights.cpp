#include "model/weights.h"

#include <set>

#include "core/error.h"

namespace ditbatch {

std::map<std::string, std::string> WeightReader::files(const Component& component) const {
  std::map<std::string, std::string> out;
  for (const auto& name : component.tensor_names()) out[name] = component.file_bytes(name);
  return out;
}

Tensor WeightReader::stored_file_tensor(const std::string& path, const std::string& name) const {
  auto it = open_files_.find(path);
  if (it == open_files_.end()) it = open_files_.emplace(path, SafetensorsFile::open(path)).first;
  const SafetensorsEntry* entry = it->second->find(name);
  if (!entry) fail_input("{}: no tensor '{}' (was the file changed since the run checked it?)", path, name);
  return it->second->tensor(*entry);
}

void check_block_counts(const std::vector<BlockCount>& counts, const std::vector<std::string>& tensor_names,
                        const std::string& where) {
  for (const BlockCount& count : counts) {
    std::set<int64_t> blocks;
    for (const std::string& name : tensor_names) {
      if (name.rfind(count.prefix, 0) != 0) continue;
      const size_t from = count.prefix.size(), dot = name.find('.', from);
      const std::string index = name.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
      if (!index.empty() && index.size() < 10 && index.find_first_not_of("0123456789") == std::string::npos)
        blocks.insert(std::stoll(index));
    }
    const auto held = static_cast<int64_t>(blocks.size());
    const bool numbered = held == 0 || *blocks.rbegin() == held - 1;
    if (count.value == held && numbered) continue;
    const std::string found = held == 0 ? fmt::format("no {}N. tensors", count.prefix)
                              : numbered ? fmt::format("{} ({}0 .. {}{})", held, count.prefix, count.prefix, held - 1)
                                         : fmt::format("{} numbered {}{} .. {}{} with gaps", held, count.prefix,
                                                       *blocks.begin(), count.prefix, *blocks.rbegin());
    fail_input("{}: config {} = {}, but the file holds {}: the config does not describe these tensors", where,
               count.config_key, count.value, found);
  }
}

Tensor upload_bound(Backend* be, const Tensor& host) {
  if (!host.defined() || !be) return host;
  return be->upload_weight(host);
}

Linear bind_linear(WeightBinder& binder, Backend* be, const std::string& name, int64_t out, int64_t in,
                   bool with_bias, const std::string& why, LinearOut result) {
  Linear l;
  l.weight = upload_bound(be, binder.bind(name + ".weight", {out, in}, WeightInit::Matrix, why));
  if (!with_bias) return l;
  const Tensor bias = binder.bind(name + ".bias", {out}, WeightInit::Bias, why);
  if (result == LinearOut::F32 && bias.defined() && be)
    l.bias = be->upload(bias, DType::F32);
  else
    l.bias = upload_bound(be, bias);
  return l;
}

Tensor bind_vector(WeightBinder& binder, Backend* be, const std::string& name, int64_t n, WeightInit init,
                   const std::string& why) {
  return upload_bound(be, binder.bind(name, {n}, init, why));
}

}  // namespace ditbatch
