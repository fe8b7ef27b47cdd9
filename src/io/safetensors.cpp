#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/fs.h"
#include "io/json_text.h"

namespace ditbatch {
namespace fs = std::filesystem;

namespace {

DType safetensors_dtype(const std::string& path, const std::string& tensor, const std::string& name) {
  if (name == "F32") return DType::F32;
  if (name == "BF16") return DType::BF16;
  if (name == "F16") return DType::F16;
  if (name == "I64") return DType::I64;
  if (name == "I32") return DType::I32;
  if (name == "U8") return DType::U8;
  fail_input("{}: tensor '{}' has unsupported dtype '{}' (expected F32, BF16 or F16)", path, tensor, name);
}

uint64_t checked_numel(const std::string& path, const std::string& tensor, const Shape& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) fail_input("{}: tensor '{}' has a negative dimension in {}", path, tensor, shape_str(shape));
    if (d != 0 && n > UINT64_MAX / static_cast<uint64_t>(d))
      fail_input("{}: tensor '{}' shape {} overflows", path, tensor, shape_str(shape));
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  std::string why;
  int fd = open_regular_file(path, true, &why);  // never a FIFO (open would block) or a device
  if (fd < 0) fail_input("{}: cannot open as a safetensors file: {}", path, why);
  struct stat st {};
  ::fstat(fd, &st);
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ < 8) {
    ::close(fd);
    fail_input("{}: truncated: {} bytes, but a safetensors file starts with an 8-byte header length", path,
               f->size_);
  }
  f->map_ = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (f->map_ == MAP_FAILED) {
    f->map_ = nullptr;
    fail_input("{}: cannot map: {}", path, std::strerror(errno));
  }
  uint64_t header_len;
  std::memcpy(&header_len, f->map_, 8);  // little-endian u64 (x86-64 and aarch64 are LE)
  if (header_len > f->size_ - 8)
    fail_input("{}: header length {} exceeds the file size {} (truncated or not a safetensors file)", path,
               header_len, f->size_);
  f->data_start_ = 8 + header_len;
  const uint64_t data_size = f->size_ - f->data_start_;
  nlohmann::json header;
  try {
    header = parse_json(std::string_view(static_cast<const char*>(f->map_) + 8, header_len));
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object()) fail_input("{}: header must be a JSON object", path);
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      f->metadata_ = v;
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail_input("{}: tensor '{}' must have dtype, shape and data_offsets", path, name);
    if (!v["dtype"].is_string()) fail_input("{}: tensor '{}': dtype is not a string", path, name);
    SafetensorsEntry e;
    e.name = name;
    e.dtype = safetensors_dtype(path, name, v["dtype"].get<std::string>());
    if (!v["shape"].is_array()) fail_input("{}: tensor '{}': shape is not a list", path, name);
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        fail_input("{}: tensor '{}': shape {} must hold non-negative integers", path, name, v["shape"].dump());
      e.shape.push_back(d.get<int64_t>());
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail_input("{}: tensor '{}': data_offsets {} must be two non-negative integers", path, name, off.dump());
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end)
      fail_input("{}: tensor '{}': data_offsets [{}, {}] are reversed", path, name, e.begin, e.end);
    if (e.end > data_size)
      fail_input("{}: tensor '{}': data_offsets [{}, {}] run past the data section of {} bytes (truncated file?)",
                 path, name, e.begin, e.end, data_size);
    uint64_t expected = checked_numel(path, name, e.shape) * dtype_size(e.dtype);
    if (e.end - e.begin != expected)
      fail_input("{}: tensor '{}': {} bytes at [{}, {}], but {} {} needs {} bytes", path, name, e.end - e.begin,
                 e.begin, e.end, v["dtype"].get<std::string>(), shape_str(e.shape), expected);
    f->entries_.push_back(std::move(e));
  }
  // Overlap check on the byte ranges, in file order.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& e : f->entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* a = by_offset[i - 1];
    const auto* b = by_offset[i];
    if (b->begin < a->end && b->begin != b->end && a->begin != a->end)
      fail_input("{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", path, a->name, a->begin, a->end, b->name,
                 b->begin, b->end);
  }
  std::sort(f->entries_.begin(), f->entries_.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, size_);
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const SafetensorsEntry& e, const std::string& n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

const void* SafetensorsFile::data(const SafetensorsEntry& e) const {
  return static_cast<const char*>(map_) + data_start_ + e.begin;
}

namespace {
std::atomic<int64_t> g_safetensors_bytes_read{0};
}

int64_t safetensors_bytes_read() { return g_safetensors_bytes_read; }

Tensor SafetensorsFile::tensor(const SafetensorsEntry& e) const {
  Tensor t = Tensor::host(e.shape, e.dtype);
  std::memcpy(t.raw(), data(e), e.end - e.begin);
  g_safetensors_bytes_read += static_cast<int64_t>(e.end - e.begin);
  return t;
}

void SafetensorsFile::release(const SafetensorsEntry& e) const {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t start = (data_start_ + e.begin) / page * page;
  size_t stop = std::min(size_, data_start_ + e.end);
  if (stop > start) ::madvise(static_cast<char*>(map_) + start, stop - start, MADV_DONTNEED);
}

// ---- sets ----------------------------------------------------------------------------------

SafetensorsSet SafetensorsSet::open_file(const std::string& path) {
  SafetensorsSet set;
  set.files_.push_back(SafetensorsFile::open(path));
  for (const auto& e : set.files_[0]->entries()) set.items_.push_back({&e, set.files_[0]});
  return set;
}

SafetensorsSet SafetensorsSet::open_index(const std::string& index_path) {
  nlohmann::json index;
  try {
    index = parse_json(read_file(index_path));
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: not valid JSON: {}", index_path, e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail_input("{}: missing the \"weight_map\" object of a sharded safetensors index", index_path);
  fs::path dir = fs::path(index_path).parent_path();
  std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
  SafetensorsSet set;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      fail_input("{}: weight_map entry '{}' is not a file name", index_path, it.key());
    std::string shard = it.value().get<std::string>();
    if (shard.find('/') != std::string::npos || shard == ".." || shard.empty())
      fail_input("{}: weight_map entry '{}' names '{}', which is not a file in the same folder", index_path,
                 it.key(), shard);
    if (!shard.ends_with(".safetensors"))  // (an index naming itself was read as a safetensors header)
      fail_input("{}: weight_map entry '{}' names {}, which is not a .safetensors file", index_path, it.key(),
                 json_excerpt(nlohmann::json(shard)));
    if (!shards.count(shard)) {
      std::string path = (dir / shard).string();
      if (!file_exists(path))
        fail_input("{}: shard '{}' (for tensor '{}') does not exist", index_path, shard, it.key());
      shards[shard] = SafetensorsFile::open(path);
      set.files_.push_back(shards[shard]);
    }
    const SafetensorsEntry* e = shards[shard]->find(it.key());
    if (!e) fail_input("{}: tensor '{}' is listed in {} but that shard does not hold it", index_path, it.key(), shard);
    set.items_.push_back({e, shards[shard]});
  }
  // Tensors present in a shard but not listed would be silently lost: refuse.
  for (const auto& [shard, file] : shards)
    for (const auto& e : file->entries())
      if (!index["weight_map"].contains(e.name) || index["weight_map"][e.name] != shard)
        fail_input("{}: shard {} holds tensor '{}', which the weight_map does not assign to it", index_path, shard,
                   e.name);
  std::sort(set.items_.begin(), set.items_.end(), [](const Item& a, const Item& b) { return a.entry->name < b.entry->name; });
  return set;
}

SafetensorsSet SafetensorsSet::open_dir(const std::string& dir) {
  if (!fs::is_directory(dir)) fail_input("{}: not a directory", dir);
  std::vector<std::string> indexes, singles;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (name.size() > 23 && name.ends_with(".safetensors.index.json")) indexes.push_back(entry.path().string());
    else if (name.ends_with(".safetensors")) singles.push_back(entry.path().string());
  }
  std::sort(indexes.begin(), indexes.end());
  std::sort(singles.begin(), singles.end());
  if (indexes.size() > 1)
    fail_input("{}: more than one safetensors index ({}); keep one", dir, fmt::join(indexes, ", "));
  if (indexes.size() == 1) return open_index(indexes[0]);
  if (singles.empty()) fail_input("{}: no *.safetensors file and no *.safetensors.index.json", dir);
  if (singles.size() > 1)
    fail_input("{}: {} safetensors files but no index.json saying how they fit together", dir, singles.size());
  return open_file(singles[0]);
}

size_t SafetensorsSet::total_bytes() const {
  size_t total = 0;
  for (const auto& item : items_) total += item.entry->end - item.entry->begin;
  return total;
}

std::vector<std::string> SafetensorsSet::files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

}  // namespace ditbatch
