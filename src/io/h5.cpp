#include "io/h5.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <atomic>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace ditbatch::h5 {
namespace {

// HDF5 prints its error stack to stderr by default; ditbatch reports errors itself.
void silence_hdf5() {
  static std::once_flag once;
  std::call_once(once, [] {
    H5open();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  });
}

herr_t collect_error(unsigned n, const H5E_error2_t* err, void* out) {
  auto* messages = static_cast<std::vector<std::string>*>(out);
  (void)n;
  if (err->desc && *err->desc) messages->push_back(err->desc);
  return 0;
}

// A 16-bit little-endian IEEE-style float: sign at bit 15, then the exponent, then the mantissa.
Handle make_float16_type(size_t exponent_bits, size_t mantissa_bits, size_t bias) {
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, mantissa_bits, exponent_bits, 0, mantissa_bits);
  H5Tset_precision(t, 16);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, bias);
  return Handle(t, H5Tclose);
}

// Properties shared by every object ditbatch writes: no timestamps, so the same content gives
// the same bytes (make-tiny is reproducible file for file).
Handle dataset_create_plist() {
  hid_t p = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_obj_track_times(p, false);
  return Handle(p, H5Pclose);
}
Handle group_create_plist() {
  hid_t p = H5Pcreate(H5P_GROUP_CREATE);
  H5Pset_obj_track_times(p, false);
  return Handle(p, H5Pclose);
}

DType detect_dtype(hid_t type, const std::string& where) {
  H5T_class_t cls = H5Tget_class(type);
  size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT) {
    if (H5Tget_order(type) != H5T_ORDER_LE)
      fail_input("{}: big-endian floats are not supported (expected little-endian f32/bf16/f16)", where);
    size_t spos, epos, esize, mpos, msize;
    H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize);
    if (size == 4 && esize == 8 && msize == 23) return DType::F32;
    if (size == 2 && esize == 8 && msize == 7) return DType::BF16;
    if (size == 2 && esize == 5 && msize == 10) return DType::F16;
    fail_input("{}: unsupported float type ({} bytes, {} exponent bits, {} mantissa bits); expected "
               "f32, bf16 or f16",
               where, size, esize, msize);
  }
  if (cls == H5T_INTEGER) {
    H5T_sign_t sign = H5Tget_sign(type);
    if (size == 8 && sign == H5T_SGN_2) return DType::I64;
    if (size == 4 && sign == H5T_SGN_2) return DType::I32;
    if (size == 1 && sign == H5T_SGN_NONE) return DType::U8;
    fail_input("{}: unsupported integer type ({} bytes, {}); expected i64, i32 or u8", where, size,
               sign == H5T_SGN_2 ? "signed" : "unsigned");
  }
  fail_input("{}: unsupported HDF5 type class {} (expected a float or integer tensor)", where,
             static_cast<int>(cls));
}

Handle make_space(const Shape& shape) {
  if (shape.empty()) return Handle(H5Screate(H5S_SCALAR), H5Sclose);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return Handle(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
}

}  // namespace

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    closer_ = o.closer_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void Handle::reset() {
  if (id_ >= 0 && closer_) closer_(id_);
  id_ = H5I_INVALID_HID;
}

std::string last_error() {
  std::vector<std::string> messages;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_error, &messages);
  H5Eclear2(H5E_DEFAULT);
  if (messages.empty()) return "";
  return messages.front();
}

hid_t file_type(DType dtype) {
  static Handle bf16 = (silence_hdf5(), make_float16_type(8, 7, 127));
  static Handle f16 = make_float16_type(5, 10, 15);
  switch (dtype) {
    case DType::F32: return H5T_IEEE_F32LE;
    case DType::BF16: return bf16.id();
    case DType::F16: return f16.id();
    case DType::I32: return H5T_STD_I32LE;
    case DType::I64: return H5T_STD_I64LE;
    case DType::U8: return H5T_STD_U8LE;
  }
  fail("file_type: bad dtype");
}

}  // namespace ditbatch::h5

namespace ditbatch::h5 {

// ---------------------------------------------------------------------------------------------
// File

File File::open_read(const std::string& path) {
  silence_hdf5();
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) fail_input("{}: no such file", path);
  if (!S_ISREG(st.st_mode)) fail_input("{}: not a regular file", path);
  htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 <= 0) {
    std::string detail = last_error();
    fail_input("{}: not an HDF5 file{}{}", path, detail.empty() ? "" : ": ", detail);
  }
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) {
    std::string detail = last_error();
    fail_input("{}: cannot open the HDF5 file (truncated or corrupt?): {}", path,
               detail.empty() ? "unknown HDF5 error" : detail);
  }
  File f;
  f.handle_ = Handle(id, H5Fclose);
  f.path_ = path;
  return f;
}

namespace {
constexpr hsize_t kPage = 4096;

hid_t create_file(const std::string& path, unsigned flags, bool page_aligned = false) {
  silence_hdf5();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl.valid() || (page_aligned && H5Pset_alignment(fapl.id(), kPage, kPage) < 0))
    fail("{}: cannot set up the HDF5 file access: {}", path, last_error());
  const hid_t id = H5Fcreate(path.c_str(), flags, H5P_DEFAULT, fapl.id());
  if (id < 0) fail_input("{}: cannot create the HDF5 file: {}", path, last_error());
  return id;
}
}  // namespace

File File::create(const std::string& path) {
  File f;
  f.handle_ = Handle(create_file(path, H5F_ACC_TRUNC), H5Fclose);
  f.path_ = path;
  return f;
}

File File::create_exclusive(const std::string& path, bool page_aligned) {
  File f;
  f.handle_ = Handle(create_file(path, H5F_ACC_EXCL, page_aligned), H5Fclose);
  f.path_ = path;
  return f;
}

File File::open_rw(const std::string& path) {
  silence_hdf5();
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (id < 0) fail_input("{}: cannot open for writing: {}", path, last_error());
  File f;
  f.handle_ = Handle(id, H5Fclose);
  f.path_ = path;
  return f;
}

namespace {
// The descriptor of a file HDF5 opened with its default sec2 driver; none with another driver.
std::optional<int> sec2_descriptor(hid_t file) {
  Handle fapl(H5Fget_access_plist(file), H5Pclose);
  if (!fapl.valid() || H5Pget_driver(fapl.id()) != H5FD_SEC2) return std::nullopt;
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 || !handle) {
    (void)last_error();
    return std::nullopt;
  }
  return *static_cast<int*>(handle);
}
}  // namespace

std::optional<int> File::descriptor() const { return sec2_descriptor(handle_.id()); }

Group File::root() const {
  hid_t g = H5Gopen2(handle_.id(), "/", H5P_DEFAULT);
  if (g < 0) fail_input("{}: cannot open the root group: {}", path_, last_error());
  return Group(Handle(g, H5Gclose), path_, "/");
}

void File::close_checked() {
  if (!handle_.valid()) return;
  const ssize_t open_objects = H5Fget_obj_count(
      handle_.id(), H5F_OBJ_DATASET | H5F_OBJ_GROUP | H5F_OBJ_DATATYPE | H5F_OBJ_ATTR | H5F_OBJ_LOCAL);
  DITBATCH_CHECK(open_objects == 0, "{}: closed with {} of its objects still open (it would stay open)", path_,
                 open_objects);
  const hid_t id = handle_.release();  // not closed twice, whatever happens
  if (H5Fclose(id) < 0) fail("{}: cannot write the file (disk full?): {}", path_, last_error());
}

void File::flush() const {
  if (H5Fflush(handle_.id(), H5F_SCOPE_GLOBAL) < 0) fail("{}: flush failed: {}", path_, last_error());
}

// ---------------------------------------------------------------------------------------------
// Group: structure

std::string Group::where(const std::string& child) const {
  std::string p = path_;
  if (!child.empty()) p = (p == "/" ? "/" : p + "/") + child;
  return file_ + ":" + p;
}

bool Group::has(const std::string& name) const {
  if (name.empty() || name.find('/') != std::string::npos) return false;
  htri_t r = H5Lexists(id(), name.c_str(), H5P_DEFAULT);
  return r > 0;
}

namespace {
H5O_type_t object_type(hid_t group, const std::string& name) {
  H5O_info_t info;
  if (H5Oget_info_by_name(group, name.c_str(), &info, H5P_DEFAULT) < 0) return H5O_TYPE_UNKNOWN;
  return info.type;
}
}  // namespace

bool Group::has_group(const std::string& name) const {
  return has(name) && object_type(id(), name) == H5O_TYPE_GROUP;
}

bool Group::has_dataset(const std::string& name) const {
  return has(name) && object_type(id(), name) == H5O_TYPE_DATASET;
}

std::vector<std::string> Group::members() const {
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->push_back(name);
    return 0;
  };
  hsize_t idx = 0;
  if (H5Literate(id(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect, &names) < 0)
    fail_input("{}: cannot list members: {}", where(), last_error());
  std::sort(names.begin(), names.end());
  return names;
}

Group Group::open_group(const std::string& name) const {
  if (!has_group(name)) fail_input("{}: missing group '{}'", where(), name);
  hid_t g = H5Gopen2(id(), name.c_str(), H5P_DEFAULT);
  if (g < 0) fail_input("{}: cannot open group: {}", where(name), last_error());
  std::string p = (path_ == "/" ? "/" : path_ + "/") + name;
  return Group(Handle(g, H5Gclose), file_, p);
}

Group Group::create_group(const std::string& name) const {
  Handle gcpl = group_create_plist();
  hid_t g = H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, gcpl.id(), H5P_DEFAULT);
  if (g < 0) fail("{}: cannot create group: {}", where(name), last_error());
  std::string p = (path_ == "/" ? "/" : path_ + "/") + name;
  return Group(Handle(g, H5Gclose), file_, p);
}

// ---------------------------------------------------------------------------------------------
// Group: attributes

bool Group::has_attr(const std::string& name) const { return H5Aexists(id(), name.c_str()) > 0; }

std::vector<std::string> Group::attr_names() const {
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->push_back(name);
    return 0;
  };
  hsize_t idx = 0;
  H5Aiterate2(id(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect, &names);
  return names;
}

namespace {

void write_attr(const Group& g, const std::string& name, hid_t type, const Shape& shape,
                const void* data) {
  if (H5Aexists(g.id(), name.c_str()) > 0) H5Adelete(g.id(), name.c_str());
  Handle space = make_space(shape);
  hid_t a = H5Acreate2(g.id(), name.c_str(), type, space.id(), H5P_DEFAULT, H5P_DEFAULT);
  if (a < 0) fail("{}: cannot create attribute '{}': {}", g.where(), name, last_error());
  Handle attr(a, H5Aclose);
  if (H5Awrite(a, type, data) < 0)
    fail("{}: cannot write attribute '{}': {}", g.where(), name, last_error());
}

Handle open_attr(const Group& g, const std::string& name) {
  if (H5Aexists(g.id(), name.c_str()) <= 0)
    fail_input("{}: missing attribute '{}'", g.where(), name);
  return Handle(H5Aopen(g.id(), name.c_str(), H5P_DEFAULT), H5Aclose);
}

hssize_t attr_count(const Handle& attr) {
  Handle space(H5Aget_space(attr.id()), H5Sclose);
  return H5Sget_simple_extent_npoints(space.id());
}

template <typename T>
std::vector<T> read_numeric_attr(const Group& g, const std::string& name, hid_t mem_type) {
  Handle attr = open_attr(g, name);
  Handle type(H5Aget_type(attr.id()), H5Tclose);
  H5T_class_t cls = H5Tget_class(type.id());
  if (cls != H5T_INTEGER && cls != H5T_FLOAT)
    fail_input("{}: attribute '{}' is not numeric", g.where(), name);
  std::vector<T> values(static_cast<size_t>(attr_count(attr)));
  if (!values.empty() && H5Aread(attr.id(), mem_type, values.data()) < 0)
    fail_input("{}: cannot read attribute '{}': {}", g.where(), name, last_error());
  return values;
}

}  // namespace

void Group::set_attr(const std::string& name, const std::string& value) const {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id(), H5T_VARIABLE);
  H5Tset_cset(type.id(), H5T_CSET_UTF8);
  const char* p = value.c_str();
  write_attr(*this, name, type.id(), {}, &p);
}

void Group::set_attr(const std::string& name, int64_t value) const {
  write_attr(*this, name, H5T_NATIVE_INT64, {}, &value);
}

void Group::set_attr(const std::string& name, double value) const {
  write_attr(*this, name, H5T_NATIVE_DOUBLE, {}, &value);
}

void Group::set_attr(const std::string& name, const std::vector<int64_t>& values) const {
  write_attr(*this, name, H5T_NATIVE_INT64, {static_cast<int64_t>(values.size())}, values.data());
}

void Group::set_attr(const std::string& name, const std::vector<double>& values) const {
  write_attr(*this, name, H5T_NATIVE_DOUBLE, {static_cast<int64_t>(values.size())}, values.data());
}

std::string Group::attr_string(const std::string& name) const {
  Handle attr = open_attr(*this, name);
  Handle type(H5Aget_type(attr.id()), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_STRING)
    fail_input("{}: attribute '{}' is not a string", where(), name);
  if (H5Tis_variable_str(type.id()) > 0) {
    Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.id(), H5T_VARIABLE);
    H5Tset_cset(mem.id(), H5Tget_cset(type.id()));
    char* p = nullptr;
    if (H5Aread(attr.id(), mem.id(), &p) < 0)
      fail_input("{}: cannot read attribute '{}': {}", where(), name, last_error());
    std::string value = p ? p : "";
    H5free_memory(p);
    return value;
  }
  size_t size = H5Tget_size(type.id());
  std::string value(size, '\0');
  if (H5Aread(attr.id(), type.id(), value.data()) < 0)
    fail_input("{}: cannot read attribute '{}': {}", where(), name, last_error());
  value.resize(std::strlen(value.c_str()));
  return value;
}

int64_t Group::attr_int(const std::string& name) const {
  auto v = attr_ints(name);
  if (v.size() != 1) fail_input("{}: attribute '{}' has {} values, expected 1", where(), name, v.size());
  return v[0];
}

double Group::attr_double(const std::string& name) const {
  auto v = attr_doubles(name);
  if (v.size() != 1) fail_input("{}: attribute '{}' has {} values, expected 1", where(), name, v.size());
  return v[0];
}

std::vector<int64_t> Group::attr_ints(const std::string& name) const {
  return read_numeric_attr<int64_t>(*this, name, H5T_NATIVE_INT64);
}

std::vector<double> Group::attr_doubles(const std::string& name) const {
  return read_numeric_attr<double>(*this, name, H5T_NATIVE_DOUBLE);
}

std::string Group::attr_text(const std::string& name) const {
  H5T_class_t type_class = H5T_NO_CLASS;
  size_t size = 0;
  {
    Handle attr = open_attr(*this, name);
    Handle type(H5Aget_type(attr.id()), H5Tclose);
    type_class = H5Tget_class(type.id());
    size = H5Tget_size(type.id());
  }
  switch (type_class) {
    case H5T_STRING: return "s:" + attr_string(name);
    case H5T_INTEGER: return fmt::format("i:{}", fmt::join(attr_ints(name), ","));
    case H5T_FLOAT: {
      std::string text = "f:";
      for (const double v : attr_doubles(name)) text += fmt::format("{}{:.17g}", text.size() > 2 ? "," : "", v);
      return text;
    }
    default: return fmt::format("c{}:{} bytes", static_cast<int>(type_class), size);
  }
}

// ---------------------------------------------------------------------------------------------
// Group: datasets

void Group::write_dataset(const std::string& name, const Shape& shape, DType dtype,
                          const void* data) const {
  Handle space = make_space(shape);
  Handle dcpl = dataset_create_plist();
  hid_t d = H5Dcreate2(id(), name.c_str(), file_type(dtype), space.id(), H5P_DEFAULT, dcpl.id(),
                       H5P_DEFAULT);
  if (d < 0) fail("{}: cannot create dataset: {}", where(name), last_error());
  Handle dataset(d, H5Dclose);
  if (shape_numel(shape) > 0 && H5Dwrite(d, file_type(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    fail("{}: cannot write dataset (disk full?): {}", where(name), last_error());
  // HDF5 keeps the last bytes in its sieve buffer and writes them when the dataset closes: a
  // full disk shows only here (H5Dwrite said yes to bytes that never reached the file).
  if (H5Dclose(dataset.release()) < 0) fail("{}: cannot write dataset (disk full?): {}", where(name), last_error());
}

std::optional<RawExtent> Group::create_dataset_for_pwrite(const std::string& name, const Shape& shape,
                                                          DType dtype) const {
  if constexpr (std::endian::native != std::endian::little) return std::nullopt;  // the file stores little-endian
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  if (bytes == 0) return std::nullopt;
  Handle file(H5Iget_file_id(id()), H5Fclose);
  const std::optional<int> fd = sec2_descriptor(file.id());
  if (!fd) return std::nullopt;
  Handle space = make_space(shape);
  Handle dcpl = dataset_create_plist();
  // Allocated at creation (it has an address to write at), never filled (every byte is written).
  if (H5Pset_layout(dcpl.id(), H5D_CONTIGUOUS) < 0 || H5Pset_alloc_time(dcpl.id(), H5D_ALLOC_TIME_EARLY) < 0 ||
      H5Pset_fill_time(dcpl.id(), H5D_FILL_TIME_NEVER) < 0)
    fail("{}: cannot set up the dataset: {}", where(name), last_error());
  const hid_t d = H5Dcreate2(id(), name.c_str(), file_type(dtype), space.id(), H5P_DEFAULT, dcpl.id(), H5P_DEFAULT);
  if (d < 0) fail("{}: cannot create dataset (disk full?): {}", where(name), last_error());
  Handle dataset(d, H5Dclose);
  const haddr_t offset = H5Dget_offset(d);
  if (offset == HADDR_UNDEF || H5Dget_storage_size(d) != bytes)
    fail("{}: HDF5 placed no contiguous storage of {} bytes for the dataset: {}", where(name), bytes, last_error());
  if (H5Dclose(dataset.release()) < 0) fail("{}: cannot create dataset (disk full?): {}", where(name), last_error());
  return RawExtent{*fd, static_cast<uint64_t>(offset), bytes};
}

void Group::write_tensor(const std::string& name, const Tensor& host) const {
  DITBATCH_CHECK(host.device() == Device::Host, "write_tensor of device tensor {}", host.describe());
  write_dataset(name, host.shape(), host.dtype(), host.numel() ? host.raw() : nullptr);
}

void Group::write_bytes(const std::string& name, const std::string& bytes) const {
  write_dataset(name, {static_cast<int64_t>(bytes.size())}, DType::U8, bytes.data());
}

namespace {
Handle open_dataset(const Group& g, const std::string& name) {
  if (!g.has_dataset(name)) fail_input("{}: missing dataset '{}'", g.where(), name);
  hid_t d = H5Dopen2(g.id(), name.c_str(), H5P_DEFAULT);
  if (d < 0) fail_input("{}: cannot open dataset: {}", g.where(name), last_error());
  return Handle(d, H5Dclose);
}
}  // namespace

DatasetInfo Group::dataset_info(const std::string& name) const {
  Handle d = open_dataset(*this, name);
  Handle space(H5Dget_space(d.id()), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(space.id());
  if (rank < 0) fail_input("{}: cannot read the dataset's shape: {}", where(name), last_error());
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr);
  Handle type(H5Dget_type(d.id()), H5Tclose);
  return DatasetInfo{Shape(dims.begin(), dims.end()), detect_dtype(type.id(), where(name))};
}

namespace {
std::atomic<int64_t> g_dataset_bytes_read{0};
}  // namespace

int64_t dataset_bytes_read() { return g_dataset_bytes_read; }
void count_dataset_bytes_read(int64_t bytes) { g_dataset_bytes_read += bytes; }

std::optional<RawExtent> Group::raw_extent(const std::string& name) const {
  if constexpr (std::endian::native != std::endian::little) return std::nullopt;  // the file stores little-endian
  const DatasetInfo info = dataset_info(name);
  const size_t bytes = static_cast<size_t>(shape_numel(info.shape)) * dtype_size(info.dtype);
  if (bytes == 0) return std::nullopt;
  Handle d = open_dataset(*this, name);
  Handle dcpl(H5Dget_create_plist(d.id()), H5Pclose);
  if (!dcpl.valid() || H5Pget_layout(dcpl.id()) != H5D_CONTIGUOUS || H5Pget_nfilters(dcpl.id()) != 0)
    return std::nullopt;
  Handle type(H5Dget_type(d.id()), H5Tclose);
  if (dtype_size(info.dtype) > 1 && H5Tget_order(type.id()) != H5T_ORDER_LE) return std::nullopt;
  const haddr_t offset = H5Dget_offset(d.id());
  if (offset == HADDR_UNDEF || H5Dget_storage_size(d.id()) != bytes) return std::nullopt;
  Handle file(H5Iget_file_id(d.id()), H5Fclose);
  const std::optional<int> fd = sec2_descriptor(file.id());
  if (!fd) return std::nullopt;
  return RawExtent{*fd, static_cast<uint64_t>(offset), bytes};
}

void Group::read_dataset_raw(const std::string& name, void* dst) const {
  DatasetInfo info = dataset_info(name);
  if (shape_numel(info.shape) == 0) return;
  Handle d = open_dataset(*this, name);
  if (H5Dread(d.id(), file_type(info.dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
    fail_input("{}: cannot read dataset (truncated or corrupt file?): {}", where(name), last_error());
  g_dataset_bytes_read += shape_numel(info.shape) * static_cast<int64_t>(dtype_size(info.dtype));
}

Tensor Group::read_tensor(const std::string& name) const {
  DatasetInfo info = dataset_info(name);
  Tensor t = Tensor::host(info.shape, info.dtype);
  read_dataset_raw(name, t.raw());
  return t;
}

void Group::overwrite_dataset(const std::string& name, const void* data) const {
  DatasetInfo info = dataset_info(name);
  Handle d = open_dataset(*this, name);
  if (shape_numel(info.shape) > 0 && H5Dwrite(d.id(), file_type(info.dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    fail("{}: cannot write dataset: {}", where(name), last_error());
}

void Group::set_dataset_attr(const std::string& dataset, const std::string& attr, const std::string& value) const {
  // Attributes live on any object: the dataset's handle serves as the attribute owner.
  const Group owner(open_dataset(*this, dataset), file_, where(dataset).substr(file_.size() + 1));
  owner.set_attr(attr, value);
}

std::string Group::dataset_attr_string(const std::string& dataset, const std::string& attr) const {
  const Group owner(open_dataset(*this, dataset), file_, where(dataset).substr(file_.size() + 1));
  return owner.has_attr(attr) ? owner.attr_string(attr) : "";
}

std::string Group::read_bytes(const std::string& name) const {
  DatasetInfo info = dataset_info(name);
  if (info.dtype != DType::U8 || info.shape.size() != 1)
    fail_input("{}: expected a 1-D u8 dataset, found {}{}", where(name), dtype_name(info.dtype),
               shape_str(info.shape));
  std::string bytes(static_cast<size_t>(info.shape[0]), '\0');
  read_dataset_raw(name, bytes.data());
  return bytes;
}

}  // namespace ditbatch::h5
