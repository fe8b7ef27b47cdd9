// Reading the Hugging Face safetensors format: one file (mmap'ed) or a sharded set described by
// a "*.safetensors.index.json". Every malformed header is a clear error naming file and tensor.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ditbatch {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
};

class SafetensorsFile {
 public:
  // Maps the file and validates the whole header (offsets, sizes, dtypes, overlaps).
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // sorted by name
  const SafetensorsEntry* find(const std::string& name) const;
  const nlohmann::json& metadata() const { return metadata_; }
  // The tensor's bytes inside the mapping (valid while the file lives).
  const void* data(const SafetensorsEntry& e) const;
  // A host copy of the tensor in its stored dtype (counted in safetensors_bytes_read).
  Tensor tensor(const SafetensorsEntry& e) const;
  // Drops the tensor's pages from this process's memory (keeps RSS flat while streaming).
  void release(const SafetensorsEntry& e) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  size_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  nlohmann::json metadata_;
};

// Bytes copied out of safetensors files by SafetensorsFile::tensor in this process (LoRA factors
// read at load: the "one reader per node" accounting, beside h5::dataset_bytes_read).
int64_t safetensors_bytes_read();

// All tensors of one model folder: a single *.safetensors, or the shards of an index.
class SafetensorsSet {
 public:
  // Finds "<dir>/*.safetensors.index.json" (sharded) or the single "<dir>/*.safetensors".
  static SafetensorsSet open_dir(const std::string& dir);
  static SafetensorsSet open_index(const std::string& index_path);
  static SafetensorsSet open_file(const std::string& path);

  struct Item {
    const SafetensorsEntry* entry;
    std::shared_ptr<SafetensorsFile> file;
  };
  const std::vector<Item>& items() const { return items_; }  // sorted by name
  size_t total_bytes() const;
  std::vector<std::string> files() const;

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::vector<Item> items_;
};

}  // namespace ditbatch
