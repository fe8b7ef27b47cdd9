// A thin RAII layer over the HDF5 C API: files, groups, typed attributes, contiguous datasets.
// bf16 is stored as a 16-bit HDF5 float with bf16's layout (sign 15, exponent 7..14, mantissa
// 0..6, bias 127), so h5ls/h5dump/h5py show it as a float. Errors name the file and the object.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ditbatch::h5 {

// Owns one hid_t and closes it with the right H5?close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();
  // Gives the id up without closing it (the caller closes it and checks the result).
  hid_t release() {
    const hid_t id = id_;
    id_ = H5I_INVALID_HID;
    return id;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

struct DatasetInfo {
  Shape shape;
  DType dtype;
};

// A group (or the root group) of an open file. `where` is "file.h5:/transformer" for messages.
// Bytes this process has read from datasets (tensors, files) of any HDF5 file: what a rank
// read from the weight file, whatever else it read or received (MPI over TCP, sockets).
int64_t dataset_bytes_read();
// Counts bytes read from a dataset outside HDF5 (a RawExtent read with pread).
void count_dataset_bytes_read(int64_t bytes);

// Where a dataset's stored bytes lie in the file, for reading them with pread() on HDF5's own
// file descriptor (several threads at once, no copy through the library): only a contiguous,
// unfiltered, fully written dataset whose stored bytes are its elements in this machine's
// byte order, in a file HDF5 opened with its default (sec2) driver.
struct RawExtent {
  int fd = -1;
  uint64_t offset = 0;
  size_t bytes = 0;
};

class Group {
 public:
  Group() = default;
  Group(Handle handle, std::string file, std::string path)
      : handle_(std::move(handle)), file_(std::move(file)), path_(std::move(path)) {}

  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  std::string where(const std::string& child = "") const;
  hid_t id() const { return handle_.id(); }

  bool has(const std::string& name) const;  // a direct member (group or dataset)
  bool has_group(const std::string& name) const;
  bool has_dataset(const std::string& name) const;
  std::vector<std::string> members() const;  // direct members, sorted
  Group open_group(const std::string& name) const;
  Group create_group(const std::string& name) const;

  // Attributes.
  bool has_attr(const std::string& name) const;
  std::vector<std::string> attr_names() const;
  void set_attr(const std::string& name, const std::string& value) const;
  void set_attr(const std::string& name, const char* value) const { set_attr(name, std::string(value)); }
  void set_attr(const std::string& name, int64_t value) const;
  void set_attr(const std::string& name, double value) const;
  void set_attr(const std::string& name, const std::vector<int64_t>& values) const;
  void set_attr(const std::string& name, const std::vector<double>& values) const;
  std::string attr_string(const std::string& name) const;
  int64_t attr_int(const std::string& name) const;
  double attr_double(const std::string& name) const;
  std::vector<int64_t> attr_ints(const std::string& name) const;
  std::vector<double> attr_doubles(const std::string& name) const;
  // Any attribute as text that names its type: "s:TEXT", "i:1,2", "f:0.5" (17 digits), else
  // "c<class>:<size> bytes" (what a checksum over attributes hashes).
  std::string attr_text(const std::string& name) const;

  // Datasets (contiguous). Writing a float dataset stores `data` as it is, in `dtype`.
  void write_dataset(const std::string& name, const Shape& shape, DType dtype, const void* data) const;
  // A contiguous dataset whose storage is allocated now, for its bytes (`dtype`'s, as they are
  // in memory) to be written with pwrite() at the returned RawExtent, by several threads at once
  // and not through the library; none (nothing created) where the file's driver gives no
  // descriptor or the bytes are none: then write_dataset.
  std::optional<RawExtent> create_dataset_for_pwrite(const std::string& name, const Shape& shape, DType dtype) const;
  void write_tensor(const std::string& name, const Tensor& host) const;
  void write_bytes(const std::string& name, const std::string& bytes) const;
  DatasetInfo dataset_info(const std::string& name) const;
  // Reads the dataset's elements in their stored type into dst (dst holds numel * size bytes).
  void read_dataset_raw(const std::string& name, void* dst) const;
  // The dataset's bytes in the file, where pread() may read them (see RawExtent); else none.
  std::optional<RawExtent> raw_extent(const std::string& name) const;
  // A host tensor in the stored dtype.
  Tensor read_tensor(const std::string& name) const;
  std::string read_bytes(const std::string& name) const;
  // Overwrites an existing dataset's elements (same stored type and element count).
  void overwrite_dataset(const std::string& name, const void* data) const;
  // A string attribute of a dataset of this group ("" when it has none).
  void set_dataset_attr(const std::string& dataset, const std::string& attr, const std::string& value) const;
  std::string dataset_attr_string(const std::string& dataset, const std::string& attr) const;

 private:
  Handle handle_;
  std::string file_;
  std::string path_;
};

class File {
 public:
  // Opens for reading; a clear error if missing, not HDF5, truncated or corrupt.
  static File open_read(const std::string& path);
  // Creates (truncating) a file for writing.
  static File create(const std::string& path);
  // Creates a file that must not exist yet (O_CREAT | O_EXCL: never through a symbolic link),
  // for temporaries in folders others may write to. With `page_aligned`, every object of a page
  // or more starts at a multiple of the page (4096 bytes): a dataset's bytes can then be used
  // where a mapping of the file puts them, and share no page with another's.
  static File create_exclusive(const std::string& path, bool page_aligned = false);
  // Opens an existing file for reading and writing (tools and tests that patch a dataset).
  static File open_rw(const std::string& path);
  Group root() const;
  const std::string& path() const { return path_; }
  // HDF5's own descriptor of the file (its default sec2 driver), where RawExtent offsets lie.
  std::optional<int> descriptor() const;
  void flush() const;
  void close() { handle_.reset(); }
  // Closes, writing what HDF5 still buffers; a failure (a full disk) throws naming the file.
  // Close every group and dataset of the file first: HDF5 closes a file only with its last
  // object, and reports nothing to a call that did not close it.
  void close_checked();

 private:
  Handle handle_;
  std::string path_;
};

// The innermost message of the current HDF5 error stack ("" if none); clears the stack.
std::string last_error();
// The HDF5 type ditbatch stores for a dtype (bf16: the custom float described above).
hid_t file_type(DType dtype);

}  // namespace ditbatch::h5
