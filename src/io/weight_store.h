// The ditbatch weight file: one HDF5 file holds a whole pipeline.
//
//   /                 attrs: format_version, model_name, source, created_by,
//                            checksum.<component>, checksum (of those), prompt_template,
//                            prompt_template_encode_start_idx
//   /transformer      attrs: config_json (the diffusers config.json verbatim) + one typed
//   /text_encoder            attribute per numeric/bool/string config key (nested keys dotted:
//   /vae                     "text_config.hidden_size"); one dataset per tensor, named by its
//                            diffusers state-dict key, contiguous, f32/bf16/f16, those of
//                            a page or more page aligned (a mapped file's tensors are views)
//   /tokenizer        the tokenizer files as u8 datasets (vocab.json, merges.txt, ...)
//   /scheduler        attrs: config_json + typed attributes (no datasets)
//
// Every dataset carries its digest (attribute xxh3_128_4mib, tensor_digest() of its stored
// bytes), and every read of a dataset checks it: a tensor edited in place (scaled, NaN-ed) is
// refused with its name, never taken for the model the file names. A component's checksum is
// the SHA-256 of its config and of each dataset's name, dtype, shape and digest; the file's of
// its components' (sorted by name). WeightStore derives both from what the file holds and
// refuses a file whose recorded checksum differs, so the checksum that PNGs and manifests name
// always describes the bytes that are read. Format 2 files (SHA-256 digests, attribute
// sha256_4mib) are still read and checked; format 1 files (no digests) are refused with what to
// do: convert them again.
//
// Why XXH3 and not SHA-256: the digests guard against damage and in-place edits, not against
// someone who can write the file (who could rewrite the digests too, whatever the hash); and
// SHA-256 at ~1.8 GB/s a core is slower than a page-cache read (~5 GB/s), so checking every
// byte would halve the load rate, while XXH3 hashes at memory speed.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/fs.h"
#include "core/mapped_file.h"
#include "core/remove_on_signal.h"
#include "core/sha256.h"
#include "io/config.h"
#include "io/h5.h"

namespace ditbatch {

// Format 4: the file's checksum covers its root attributes too (prompt template, pipeline class,
// sigma grid, ...: what changes an image besides configs and tensors), as "checksum.root".
constexpr int64_t kWeightFormatVersion = 4;

// How a format digests a dataset's stored bytes: the hash of the concatenated hex hashes of
// each 4 MiB piece (the pieces hash in parallel, each right after it is read).
enum class DigestKind {
  Sha256Pieces,  // format 2: SHA-256
  Xxh3Pieces,    // formats 3 and 4: XXH3-128 (the canonical, big-endian hex of xxhsum -H2)
};
constexpr size_t kDigestPiece = size_t{4} << 20;
DigestKind digest_kind_of_format(int64_t format_version);
const char* digest_attribute(DigestKind kind);  // "sha256_4mib", "xxh3_128_4mib"
std::string piece_digest(DigestKind kind, const void* data, size_t bytes);  // the hex hash of one piece
std::string combine_piece_digests(DigestKind kind, const std::vector<std::string>& pieces);
// The digest of `bytes` bytes in memory (what the writer records; XXH3, formats 3 and 4, unless told).
std::string tensor_digest(const void* data, size_t bytes, DigestKind kind = DigestKind::Xxh3Pieces);
// The components a pipeline file holds, in the order they are written.
const std::vector<std::string>& pipeline_components();

// One component group of an open weight file.
class Component {
 public:
  // With `mapping` (the file mapped, see WeightAccess), tensors are views of it where they can be.
  Component(h5::Group group, std::string name, DigestKind digests = DigestKind::Xxh3Pieces,
            std::shared_ptr<MappedFile> mapping = nullptr);
  const std::string& name() const { return name_; }
  std::string where(const std::string& child = "") const { return group_.where(child); }
  const h5::Group& group() const { return group_; }

  // The diffusers config.json kept verbatim (empty for the tokenizer).
  const Config& config() const { return config_; }

  bool has_tensor(const std::string& name) const { return group_.has_dataset(name); }
  std::vector<std::string> tensor_names() const;  // sorted
  h5::DatasetInfo tensor_info(const std::string& name) const;
  // A host tensor in its stored dtype: a view of the mapped file where the file is mapped and
  // the dataset's bytes lie there whole and aligned, else read into memory of its own; every
  // byte checked against the digest either way. Missing: names the closest existing tensors.
  Tensor tensor(const std::string& name) const;
  // The same, but the shape must be `expected`; `why` says which config values imply it. With
  // `staging`, a 16-bit tensor that is read, not mapped (every backend converts or copies it
  // when it uploads it), goes into that reused buffer; an f32 one always gets its own (a CPU
  // backend keeps it).
  Tensor tensor(const std::string& name, const Shape& expected, const std::string& why = "",
                ReusedHostBuffer* staging = nullptr) const;
  std::string file_bytes(const std::string& name) const;

 private:
  // Every byte of a dataset is read here, and checked against its digest before it is used.
  void read_verified(const std::string& name, const h5::DatasetInfo& info, void* dst) const;
  void check_digest(const std::string& name, const std::string& read) const;  // refuses a mismatch
  Tensor mapped_tensor(const std::string& name, const h5::DatasetInfo& info) const;  // undefined: read it

  h5::Group group_;
  std::string name_;
  Config config_;
  DigestKind digests_;
  std::shared_ptr<MappedFile> mapping_;
};

// How a weight file's tensors reach memory. Mapped (the default): views of the file mapped
// into memory, the page cache's own pages, for tensors the backend keeps in the stored dtype
// (f32 on the CPU) or copies from (to a GPU): no copy and no fresh memory, which is what limits
// a read into the process (clearing its fresh pages). Read: each tensor read with pread into
// memory of its own, for file systems where mapping is slow (DITBATCH_NO_MMAP=1 sets it).
enum class WeightAccess { Mapped, Read };
WeightAccess default_weight_access();  // Read where DITBATCH_NO_MMAP is set (not "0"), else Mapped

class WeightStore {
 public:
  // Opens and validates (HDF5, format version); clear errors otherwise.
  static WeightStore open(const std::string& path, WeightAccess access = default_weight_access());
  // How many times this process has opened a weight file (each open reads and checks all its
  // metadata: a run opens it once per process).
  static int64_t times_opened();
  const std::string& path() const { return path_; }
  bool has_component(const std::string& name) const;
  Component component(const std::string& name) const;  // missing: lists those present
  std::vector<std::string> components() const;
  std::string root_string(const std::string& attr, const std::string& fallback = "") const;
  int64_t root_int(const std::string& attr) const { return root_.attr_int(attr); }
  const h5::Group& root() const { return root_; }
  std::string model_name() const { return root_string("model_name", "unknown"); }
  // The model's checksum, derived from the configs and the tensors' digests (equal to the one
  // recorded when the file was written, or the file is refused when opened).
  const std::string& checksum() const { return checksum_; }

 private:
  std::shared_ptr<h5::File> file_;
  std::shared_ptr<MappedFile> mapping_;
  h5::Group root_;
  std::string path_, checksum_;
  DigestKind digests_ = DigestKind::Xxh3Pieces;
};

// What a component's checksum covers of one dataset.
struct DatasetDigest {
  std::string name, dtype, shape, digest;
};
// The checksum of a component: its config (if any) and its datasets' digests, in name order.
std::string component_checksum(const std::string& config_json, std::vector<DatasetDigest> datasets);
// The checksum of a file: of its (component, checksum) pairs, in name order (format 4: with
// ("/", root_checksum) among them).
std::string file_checksum(std::vector<std::pair<std::string, std::string>> components);
// The checksum of the root group's attributes (name and typed value, in name order) but the
// checksums themselves and those that change no image: created_by, source.
std::string root_checksum(const h5::Group& root);

// Writes a weight file: temp name, per-component checksums, fsync + rename at finish().
// Destroyed without finish(), or the process ended by SIGINT / SIGTERM / SIGHUP: the temp file
// is removed, nothing is left half-written.
class WeightWriter {
 public:
  // format_version: this ditbatch's, or 2 (SHA-256 digests) to measure what a file of the older
  // format costs to load.
  explicit WeightWriter(const std::string& final_path, int64_t format_version = kWeightFormatVersion);
  ~WeightWriter();
  // Clears the permission bits (of 0777) that `allowed` lacks, on the file being written.
  void restrict_permissions(unsigned allowed);
  WeightWriter(const WeightWriter&) = delete;
  WeightWriter& operator=(const WeightWriter&) = delete;

  void begin_component(const std::string& name, const std::string& config_json);
  // Creates a dataset and writes it in one go (data holds numel * dtype_size bytes).
  void add_tensor(const std::string& name, const Shape& shape, DType dtype, const void* data);
  void add_file(const std::string& name, const std::string& bytes);
  void end_component();
  void set_root_attr(const std::string& name, const std::string& value);
  void set_root_attr(const std::string& name, int64_t value);
  void finish();
  const std::string& temp_path() const { return temp_.path(); }

 private:
  // A tensor's bytes written at `extent` and hashed by piece; returns its digest.
  std::string write_and_hash(const h5::RawExtent& extent, const std::string& name, const char* data, size_t bytes);

  std::string final_path_;
  DigestKind digests_;
  TempFile temp_;
  std::unique_ptr<RemoveOnSignal> remove_on_signal_;
  std::unique_ptr<h5::File> file_;
  h5::Group root_;
  std::optional<h5::Group> current_;
  std::string current_name_, current_config_;
  std::vector<DatasetDigest> current_digests_;
  std::vector<std::pair<std::string, std::string>> checksums_;
  int64_t format_version_ = kWeightFormatVersion;
};

// Refuses (InputError) a weight file's path where something other than a file is: a device,
// a FIFO, a socket, a folder, or a symbolic link to one.
void check_weight_file_target(const std::string& path);

// Writes config_json plus one typed attribute per scalar/numeric-array key (nested keys dotted).
void write_config_attributes(const h5::Group& group, const std::string& config_json);
// The names in `candidates` closest to `name` (edit distance), best first.
std::vector<std::string> closest_names(const std::string& name, const std::vector<std::string>& candidates,
                                       size_t count = 3);

}  // namespace ditbatch
