#include "io/weight_store.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string_view>

#include <omp.h>
#include <xxhash.h>

#include "core/error.h"
#include "core/fs.h"
#include "io/json_text.h"

namespace ditbatch {

const std::vector<std::string>& pipeline_components() {
  static const std::vector<std::string> names = {"transformer", "text_encoder", "vae", "tokenizer",
                                                 "scheduler"};
  return names;
}

std::vector<std::string> closest_names(const std::string& name, const std::vector<std::string>& candidates,
                                       size_t count) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto& c : candidates) scored.emplace_back(distance(name, c), c);
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < std::min(count, scored.size()); ++i) out.push_back(scored[i].second);
  return out;
}

// ---- config attributes ---------------------------------------------------------------------

namespace {

void write_typed(const h5::Group& group, const std::string& key, const nlohmann::json& value) {
  if (value.is_boolean()) {
    group.set_attr(key, static_cast<int64_t>(value.get<bool>()));
  } else if (value.is_number_integer()) {
    group.set_attr(key, value.get<int64_t>());
  } else if (value.is_number_float()) {
    group.set_attr(key, value.get<double>());
  } else if (value.is_string()) {
    group.set_attr(key, value.get<std::string>());
  } else if (value.is_array() && !value.empty()) {
    bool all_int = std::all_of(value.begin(), value.end(), [](auto& v) { return v.is_number_integer() || v.is_boolean(); });
    bool all_num = std::all_of(value.begin(), value.end(), [](auto& v) { return v.is_number() || v.is_boolean(); });
    if (all_int) {
      std::vector<int64_t> v;
      for (auto& x : value) v.push_back(x.is_boolean() ? x.get<bool>() : x.get<int64_t>());
      group.set_attr(key, v);
    } else if (all_num) {
      std::vector<double> v;
      for (auto& x : value) v.push_back(x.is_boolean() ? x.get<bool>() : x.get<double>());
      group.set_attr(key, v);
    }
  } else if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) write_typed(group, key + "." + it.key(), it.value());
  }
}

}  // namespace

void write_config_attributes(const h5::Group& group, const std::string& config_json) {
  nlohmann::json config;
  try {
    config = parse_json(config_json);
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: config is not valid JSON: {}", group.where(), e.what());
  }
  if (!config.is_object()) fail_input("{}: config must be a JSON object", group.where());
  group.set_attr("config_json", config_json);
  for (auto it = config.begin(); it != config.end(); ++it) {
    if (it.key() == "config_json") continue;
    write_typed(group, it.key(), it.value());
  }
}

// ---- digests -------------------------------------------------------------------------------

namespace {

// fn(i) for i in [0, count) on the OpenMP threads; the first exception is rethrown here.
template <typename Fn>
void parallel_pieces(int64_t count, const Fn& fn) {
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1) if (count > 1)
  for (int64_t i = 0; i < count; ++i) {
    try {
      fn(i);
    } catch (...) {
#pragma omp critical
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

int64_t piece_count(size_t bytes) {
  return static_cast<int64_t>(std::max<size_t>(1, (bytes + kDigestPiece - 1) / kDigestPiece));
}

}  // namespace

DigestKind digest_kind_of_format(int64_t format_version) {
  return format_version == 2 ? DigestKind::Sha256Pieces : DigestKind::Xxh3Pieces;
}

const char* digest_attribute(DigestKind kind) {
  return kind == DigestKind::Sha256Pieces ? "sha256_4mib" : "xxh3_128_4mib";
}

std::string piece_digest(DigestKind kind, const void* data, size_t bytes) {
  if (kind == DigestKind::Sha256Pieces) {
    Sha256 h;
    h.update(data, bytes);
    return h.hex();
  }
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(data, bytes));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(32, '0');
  for (size_t i = 0; i < 16; ++i) {
    hex[2 * i] = kHex[canonical.digest[i] >> 4];
    hex[2 * i + 1] = kHex[canonical.digest[i] & 15];
  }
  return hex;
}

std::string combine_piece_digests(DigestKind kind, const std::vector<std::string>& pieces) {
  std::string all;
  all.reserve(pieces.size() * 64);
  for (const std::string& d : pieces) all += d;
  return piece_digest(kind, all.data(), all.size());
}

std::string tensor_digest(const void* data, size_t bytes, DigestKind kind) {
  const auto* p = static_cast<const char*>(data);
  std::vector<std::string> digests(static_cast<size_t>(piece_count(bytes)));
  parallel_pieces(std::ssize(digests), [&](int64_t i) {
    const size_t from = static_cast<size_t>(i) * kDigestPiece;
    digests[static_cast<size_t>(i)] = piece_digest(kind, p + from, std::min(kDigestPiece, bytes - std::min(bytes, from)));
  });
  return combine_piece_digests(kind, digests);
}

std::string component_checksum(const std::string& config_json, std::vector<DatasetDigest> datasets) {
  std::sort(datasets.begin(), datasets.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  Sha256 h;
  if (!config_json.empty()) h.update("config\n" + config_json + "\n");
  for (const DatasetDigest& d : datasets) h.update(fmt::format("{}\n{}\n{}\n{}\n", d.name, d.dtype, d.shape, d.digest));
  return h.hex();
}

std::string file_checksum(std::vector<std::pair<std::string, std::string>> components) {
  std::sort(components.begin(), components.end());
  Sha256 all;
  for (const auto& [name, sum] : components) all.update(name + ":" + sum + "\n");
  return all.hex();
}

std::string root_checksum(const h5::Group& root) {
  std::vector<std::string> names = root.attr_names();
  std::sort(names.begin(), names.end());
  Sha256 h;
  for (const std::string& name : names)
    if (name != "checksum" && !name.starts_with("checksum.") && name != "created_by" && name != "source")
      h.update(name + "\n" + root.attr_text(name) + "\n");
  return h.hex();
}

// ---- Component -----------------------------------------------------------------------------

Component::Component(h5::Group group, std::string name, DigestKind digests, std::shared_ptr<MappedFile> mapping)
    : group_(std::move(group)), name_(std::move(name)), digests_(digests), mapping_(std::move(mapping)) {
  config_ = group_.has_attr("config_json") ? Config::parse(group_.attr_string("config_json"), group_.where())
                                           : Config(nlohmann::json::object(), group_.where());
}

std::vector<std::string> Component::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& m : group_.members())
    if (group_.has_dataset(m)) names.push_back(m);
  return names;
}

h5::DatasetInfo Component::tensor_info(const std::string& name) const {
  if (!has_tensor(name)) {
    auto near = closest_names(name, tensor_names());
    fail_input("{}: missing tensor '{}' (closest: {})", where(), name,
               near.empty() ? std::string("none; the component is empty") : fmt::format("{}", fmt::join(near, ", ")));
  }
  return group_.dataset_info(name);
}

void Component::read_verified(const std::string& name, const h5::DatasetInfo& info, void* dst) const {
  const size_t bytes = static_cast<size_t>(shape_numel(info.shape)) * dtype_size(info.dtype);
  if (const std::optional<h5::RawExtent> extent = group_.raw_extent(name)) {
    // Each 4 MiB piece read and hashed by one thread while it is still in the cache, the
    // threads reading at once: read, digest and the first touch of dst overlap.
    std::vector<std::string> digests(static_cast<size_t>(piece_count(bytes)));
    parallel_pieces(std::ssize(digests), [&](int64_t i) {
      const size_t from = static_cast<size_t>(i) * kDigestPiece, count = std::min(kDigestPiece, bytes - from);
      char* to = static_cast<char*>(dst) + from;
      for (size_t done = 0; done < count;) {
        const ssize_t n = ::pread(extent->fd, to + done, count - done, static_cast<off_t>(extent->offset + from + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
          fail_input("{}: cannot read its bytes {}..{} of {} (truncated or unreadable file?): {}", where(name),
                     from + done, from + count, bytes, n < 0 ? std::strerror(errno) : "end of file");
        done += static_cast<size_t>(n);
      }
      digests[static_cast<size_t>(i)] = piece_digest(digests_, to, count);
    });
    h5::count_dataset_bytes_read(static_cast<int64_t>(bytes));
    check_digest(name, combine_piece_digests(digests_, digests));
  } else {
    group_.read_dataset_raw(name, dst);
    check_digest(name, tensor_digest(dst, bytes, digests_));
  }
}

void Component::check_digest(const std::string& name, const std::string& read) const {
  const std::string recorded = group_.dataset_attr_string(name, digest_attribute(digests_));
  if (read != recorded)
    fail_input("{}: its bytes do not match the digest recorded when the file was written ({}, read {}): the file was "
               "changed after it was written, or is damaged; convert it again",
               where(name), recorded.empty() ? std::string("none") : recorded.substr(0, 16), read.substr(0, 16));
}

Tensor Component::mapped_tensor(const std::string& name, const h5::DatasetInfo& info) const {
  if (!mapping_) return {};
  const std::optional<h5::RawExtent> extent = group_.raw_extent(name);
  // Elements at their own alignment (a file of an older ditbatch may place a dataset anywhere),
  // wholly inside the file (a truncated one is refused by the read, which names the bytes).
  if (!extent || extent->offset % dtype_size(info.dtype) != 0 || !mapping_->holds(extent->offset, extent->bytes))
    return {};
  Tensor t(mapping_->range(extent->offset, extent->bytes), 0, info.shape, info.dtype);
  // The digest's threads fault the pages in, from the page cache or the disk, all at once.
  check_digest(name, tensor_digest(t.raw(), extent->bytes, digests_));
  h5::count_dataset_bytes_read(static_cast<int64_t>(extent->bytes));
  return t;
}

Tensor Component::tensor(const std::string& name) const { return tensor(name, tensor_info(name).shape); }

std::string Component::file_bytes(const std::string& name) const {
  h5::DatasetInfo info = tensor_info(name);
  if (info.dtype != DType::U8 || info.shape.size() != 1)
    fail_input("{}: a file is stored as a 1-D u8 dataset, found {}{}", where(name), dtype_name(info.dtype),
               shape_str(info.shape));
  std::string bytes(static_cast<size_t>(info.shape[0]), '\0');
  read_verified(name, info, bytes.data());
  return bytes;
}

Tensor Component::tensor(const std::string& name, const Shape& expected, const std::string& why,
                         ReusedHostBuffer* staging) const {
  const h5::DatasetInfo info = tensor_info(name);
  if (info.shape != expected)
    fail_input("{}: shape {} does not match the expected {}{}{}", where(name), shape_str(info.shape),
               shape_str(expected), why.empty() ? "" : " from the config: ", why);
  if (!is_float(info.dtype))
    fail_input("{}: tensor has dtype {}, expected f32, bf16 or f16", where(name), dtype_name(info.dtype));
  if (Tensor mapped = mapped_tensor(name, info); mapped.defined()) return mapped;
  Tensor t = staging && info.dtype != DType::F32 ? staging->take(info.shape, info.dtype)
                                                 : Tensor::host(info.shape, info.dtype);
  read_verified(name, info, t.raw());
  return t;
}

// ---- WeightStore ---------------------------------------------------------------------------

WeightAccess default_weight_access() {
  const char* no_mmap = std::getenv("DITBATCH_NO_MMAP");
  return no_mmap && *no_mmap && std::string_view(no_mmap) != "0" ? WeightAccess::Read : WeightAccess::Mapped;
}

namespace {
std::atomic<int64_t> g_weight_stores_opened{0};
}  // namespace

int64_t WeightStore::times_opened() { return g_weight_stores_opened; }

WeightStore WeightStore::open(const std::string& path, WeightAccess access) {
  ++g_weight_stores_opened;
  WeightStore store;
  store.file_ = std::make_shared<h5::File>(h5::File::open_read(path));
  store.root_ = store.file_->root();
  store.path_ = path;
  if (access == WeightAccess::Mapped)
    if (const std::optional<int> fd = store.file_->descriptor()) store.mapping_ = MappedFile::map(*fd, path);
  if (!store.root_.has_attr("format_version"))
    fail_input("{}: not a ditbatch weight file (no format_version attribute; convert a diffusers folder "
               "with `ditbatch convert`)",
               path);
  int64_t version = store.root_.attr_int("format_version");
  if (version == 1)
    fail_input("{}: weight format 1, written by an older ditbatch: its tensors carry no digests, so a tensor changed "
               "after conversion would go unnoticed. Convert it again (ditbatch convert --from DIFFUSERS_DIR --to {}), "
               "or run make-tiny again",
               path, path);
  if (version < 2 || version > kWeightFormatVersion)
    fail_input("{}: weight format version {} is not supported by this ditbatch (expected 2 to {})", path, version,
               kWeightFormatVersion);
  store.digests_ = digest_kind_of_format(version);
  // The checksum from what the file holds (configs, names, shapes, digests: no tensor bytes,
  // which every read checks against the digests), against the one recorded when it was written.
  std::vector<std::pair<std::string, std::string>> sums;
  for (const std::string& name : store.components()) {
    const h5::Group group = store.root_.open_group(name);
    std::vector<DatasetDigest> datasets;
    for (const std::string& member : group.members()) {
      if (!group.has_dataset(member)) continue;
      const h5::DatasetInfo info = group.dataset_info(member);
      const std::string digest = group.dataset_attr_string(member, digest_attribute(store.digests_));
      if (digest.empty())
        fail_input("{}: has no {} attribute (its digest): the file was changed after it was written; convert it "
                   "again",
                   group.where(member), digest_attribute(store.digests_));
      datasets.push_back({member, std::string(dtype_name(info.dtype)), shape_str(info.shape), digest});
    }
    const std::string sum =
        component_checksum(group.has_attr("config_json") ? group.attr_string("config_json") : "", std::move(datasets));
    const std::string recorded = store.root_string("checksum." + name);
    if (sum != recorded)
      fail_input("{}: the checksum recorded for /{} ({}) does not match its config and tensor digests ({}): the file "
                 "was changed after it was written; convert it again",
                 path, name, recorded.empty() ? std::string("none") : recorded.substr(0, 12), sum.substr(0, 12));
    sums.emplace_back(name, sum);
  }
  if (version >= 4) {  // the root attributes: an edited prompt template changes every image
    const std::string sum = root_checksum(store.root_);
    const std::string recorded = store.root_string("checksum.root");
    if (sum != recorded)
      fail_input("{}: the checksum recorded for its root attributes ({}) does not match them ({}): an attribute "
                 "(prompt_template, pipeline_class, ...) was changed after the file was written; convert it again",
                 path, recorded.empty() ? std::string("none") : recorded.substr(0, 12), sum.substr(0, 12));
    sums.emplace_back("/", sum);
  }
  store.checksum_ = file_checksum(std::move(sums));
  const std::string recorded = store.root_string("checksum");
  if (store.checksum_ != recorded)
    fail_input("{}: the recorded checksum ({}) does not match its components' ({}): the file was changed after it was "
               "written; convert it again",
               path, recorded.empty() ? std::string("none") : recorded.substr(0, 12), store.checksum_.substr(0, 12));
  return store;
}

bool WeightStore::has_component(const std::string& name) const { return root_.has_group(name); }

std::vector<std::string> WeightStore::components() const {
  std::vector<std::string> out;
  for (const auto& m : root_.members())
    if (root_.has_group(m)) out.push_back(m);
  return out;
}

Component WeightStore::component(const std::string& name) const {
  if (!has_component(name)) {
    auto present = components();
    fail_input("{}: missing component '{}' (the file has: {})", path_, name,
               present.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(present, ", ")));
  }
  return Component(root_.open_group(name), name, digests_, mapping_);
}

std::string WeightStore::root_string(const std::string& attr, const std::string& fallback) const {
  return root_.has_attr(attr) ? root_.attr_string(attr) : fallback;
}

// ---- WeightWriter --------------------------------------------------------------------------

void check_weight_file_target(const std::string& path) {
  // The file is renamed into place, which would replace a device node (--to /dev/null as
  // root), a FIFO or a socket by a weight file: only a file is ever replaced.
  if (const std::string what = non_regular_file(path); !what.empty())
    fail_input("{}: is {}, not a file; ditbatch writes only regular files: name another path", path, what);
}

WeightWriter::WeightWriter(const std::string& final_path, int64_t format_version)
    : final_path_(final_path),
      digests_(digest_kind_of_format(format_version)),
      temp_(final_path, false),
      remove_on_signal_(std::make_unique<RemoveOnSignal>(temp_.path())) {
  file_ = std::make_unique<h5::File>(h5::File::create_exclusive(temp_.path(), /*page_aligned=*/true));
  root_ = file_->root();
  DITBATCH_CHECK(format_version >= 2 && format_version <= kWeightFormatVersion, "WeightWriter: format {}",
                 format_version);
  format_version_ = format_version;
  root_.set_attr("format_version", format_version);
  root_.set_attr("created_by", std::string("ditbatch ") + DITBATCH_VERSION);
}

void WeightWriter::restrict_permissions(unsigned allowed) {
  struct stat st {};
  if (::stat(temp_.path().c_str(), &st) != 0 || ::chmod(temp_.path().c_str(), st.st_mode & 07777 & allowed) != 0)
    fail("{}: cannot set its permissions: {}", temp_.path(), std::strerror(errno));
}

// Unfinished (an exception, or destroyed early): the HDF5 objects close, then temp_ removes the file.
WeightWriter::~WeightWriter() = default;

void WeightWriter::begin_component(const std::string& name, const std::string& config_json) {
  DITBATCH_CHECK(!current_, "begin_component({}) inside component {}", name, current_name_);
  current_ = root_.create_group(name);
  current_name_ = name;
  current_config_ = config_json;
  current_digests_.clear();
  if (!config_json.empty()) write_config_attributes(*current_, config_json);
}

// One thread writes the pieces in file order while the others hash them, ahead of it: a
// buffered write to one file holds its inode lock, so writers on other threads would only wait
// on it, and the kernel's copy cannot fault the source in (a page of a mapping not yet touched
// makes it zero the new page-cache pages and copy again), so the writer touches each piece
// first, by hashing it where no other thread has.
std::string WeightWriter::write_and_hash(const h5::RawExtent& extent, const std::string& name, const char* data,
                                         size_t bytes) {
  const int64_t count = piece_count(bytes);
  std::vector<std::string> digests(static_cast<size_t>(count));
  std::vector<std::atomic<bool>> claimed(static_cast<size_t>(count));
  std::atomic<int64_t> next{0};
  const auto piece = [&](int64_t i) {
    const size_t from = static_cast<size_t>(i) * kDigestPiece;
    return std::pair{from, std::min(kDigestPiece, bytes - from)};
  };
  const auto hash = [&](int64_t i) {
    const auto [from, size] = piece(i);
    digests[static_cast<size_t>(i)] = piece_digest(digests_, data + from, size);
  };
  const auto write = [&](int64_t i) {
    const auto [from, size] = piece(i);
    if (!claimed[static_cast<size_t>(i)].exchange(true)) {
      hash(i);
    } else {
      for (size_t page = 0; page < size; page += 4096) static_cast<void>(*static_cast<const volatile char*>(data + from + page));
    }
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::pwrite(extent.fd, data + from + done, size - done, static_cast<off_t>(extent.offset + from + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        fail("{}: cannot write dataset (disk full?): its bytes {}..{} of {}: {}", current_->where(name), from + done,
             from + size, bytes, n < 0 ? std::strerror(errno) : "nothing written");
      done += static_cast<size_t>(n);
    }
  };
  std::exception_ptr error;
  std::atomic<bool> failed{false};
#pragma omp parallel if (count > 1)
  {
    try {
      if (omp_get_thread_num() == 0) {
        for (int64_t i = 0; i < count && !failed; ++i) write(i);
      } else {
        for (int64_t i; (i = next++) < count;)
          if (!claimed[static_cast<size_t>(i)].exchange(true)) hash(i);
      }
    } catch (...) {
      failed = true;
#pragma omp critical
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  return combine_piece_digests(digests_, digests);
}

void WeightWriter::add_tensor(const std::string& name, const Shape& shape, DType dtype, const void* data) {
  DITBATCH_CHECK(current_, "add_tensor({}) outside a component", name);
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  // The digest covers the bytes as stored; the component's checksum adds name, dtype and shape.
  std::string digest;
  std::optional<h5::RawExtent> extent;
  if (bytes >= kDigestPiece) extent = current_->create_dataset_for_pwrite(name, shape, dtype);
  if (extent) {
    digest = write_and_hash(*extent, name, static_cast<const char*>(data), bytes);
  } else {
    current_->write_dataset(name, shape, dtype, data);
    digest = tensor_digest(data, bytes, digests_);
  }
  current_->set_dataset_attr(name, digest_attribute(digests_), digest);
  current_digests_.push_back({name, std::string(dtype_name(dtype)), shape_str(shape), digest});
}

void WeightWriter::add_file(const std::string& name, const std::string& bytes) {
  add_tensor(name, {static_cast<int64_t>(bytes.size())}, DType::U8, bytes.data());
}

void WeightWriter::end_component() {
  DITBATCH_CHECK(current_, "end_component outside a component");
  const std::string checksum = component_checksum(current_config_, current_digests_);
  root_.set_attr("checksum." + current_name_, checksum);
  checksums_.emplace_back(current_name_, checksum);
  current_.reset();
}

void WeightWriter::set_root_attr(const std::string& name, const std::string& value) { root_.set_attr(name, value); }
void WeightWriter::set_root_attr(const std::string& name, int64_t value) { root_.set_attr(name, value); }

void WeightWriter::finish() {
  DITBATCH_CHECK(!current_, "finish inside component {}", current_name_);
  if (format_version_ >= 4) {
    const std::string sum = root_checksum(root_);
    root_.set_attr("checksum.root", sum);
    checksums_.emplace_back("/", sum);
  }
  root_.set_attr("checksum", file_checksum(checksums_));
  root_ = h5::Group();
  file_->close_checked();
  check_weight_file_target(final_path_);  // checked before the work too: the rename replaces what is there now
  temp_.commit();
}

}  // namespace ditbatch
