// The safetensors reader `convert` opens for every shard of a diffusers folder: the 8-byte
// header length, the JSON header, the tensor table (dtypes, shapes, offsets, overlaps).
//
// Beyond "no crash": every tensor the reader accepts must lie inside the file and its bytes
// must be the file's bytes at the offsets the header gives (checked against the input itself,
// so a range past the end reads past libFuzzer's buffer and AddressSanitizer reports it).
#include <cstring>

#include "fuzz_util.h"
#include "io/safetensors.h"

using namespace ditbatch;

// numel x dtype size without any wrap-around, for comparing with what the reader accepted.
static unsigned __int128 exact_bytes(const SafetensorsEntry& e) {
  unsigned __int128 n = dtype_size(e.dtype);
  for (int64_t d : e.shape) {
    if (d < 0) return ~static_cast<unsigned __int128>(0);
    n *= static_cast<uint64_t>(d);
    if (n > static_cast<unsigned __int128>(UINT64_MAX)) return n;  // already past any file
  }
  return n;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fuzz::ScratchDir dir;
  const std::string path = dir.write("model.safetensors", fuzz::as_text(data, size));
  fuzz::parse([&] {
    const std::shared_ptr<SafetensorsFile> file = SafetensorsFile::open(path);
    uint64_t header_length = 0;
    std::memcpy(&header_length, data, 8);  // open() refuses files shorter than 8 bytes
    const uint64_t data_start = 8 + header_length;
    for (const SafetensorsEntry& e : file->entries()) {
      if (e.begin > e.end || data_start + e.end > size)
        fuzz::finding("tensor '" + e.name + "' accepted with a byte range outside the file");
      const uint64_t bytes = e.end - e.begin;
      if (exact_bytes(e) != bytes)
        fuzz::finding("tensor '" + e.name + "' accepted with " + std::to_string(bytes) +
                      " bytes, which is not numel x dtype size of " + shape_str(e.shape));
      if (std::memcmp(file->data(e), data + data_start + e.begin, bytes) != 0)
        fuzz::finding("tensor '" + e.name + "': the mapped bytes are not the file's");
      if (file->find(e.name) != &e) fuzz::finding("find('" + e.name + "') does not return its own entry");
    }
    (void)file->metadata().dump();
  });
  return 0;
}
