#include "pipeline/tar_shards.h"

#include <unistd.h>

#include <cerrno>
#include <optional>

#include "core/error.h"
#include "core/fs.h"
#include "core/sha256.h"
#include "io/image_record.h"
#include "io/tar_archive.h"
#include "pipeline/output_check.h"
#include "pipeline/output_layout.h"

namespace ditbatch {

std::pair<int64_t, int64_t> tar_images(const std::vector<ImageJob>& jobs, int64_t index, int64_t images_per_tar) {
  const int64_t begin = index / images_per_tar * images_per_tar;
  return {begin, std::min<int64_t>(std::ssize(jobs), begin + images_per_tar)};
}

namespace {

constexpr int64_t kMaxImageBytes = int64_t{1} << 32;  // a PNG read to be packed (a 8192² one is ~200 MB)

// The staged files of [begin, end), then their folder if that left it empty.
void remove_staged(const std::string& out_dir, const std::vector<ImageJob>& jobs, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i)
    for (const char* suffix : {".png", ".json"}) ::unlink((out_dir + "/" + jobs[static_cast<size_t>(i)].file(suffix)).c_str());
  ::rmdir((out_dir + "/" + jobs[static_cast<size_t>(begin)].folder).c_str());
}

}  // namespace

bool pack_tar(const std::string& out_dir, const std::vector<ImageJob>& jobs, int64_t begin, int64_t end,
              std::vector<uint8_t>& on_disk, ManifestPart& manifest, const Log& log) {
  const ImageJob& first = jobs[static_cast<size_t>(begin)];
  bool all_packed = true;
  for (int64_t i = begin; i < end; ++i) {
    if (on_disk[static_cast<size_t>(i)] == kNotMade) {
      log.debug("{} is not written yet: image {} is not made", first.tar, i);
      return false;
    }
    all_packed = all_packed && on_disk[static_cast<size_t>(i)] == kPacked;
  }
  if (all_packed) {
    remove_staged(out_dir, jobs, begin, end);
    return true;
  }
  TarWriter tar(out_dir + "/" + first.tar);
  std::optional<TarReader> packed;  // the tar there now, for the images already in it
  std::vector<ImageRecord> records;
  for (int64_t i = begin; i < end; ++i) {
    const ImageJob& job = jobs[static_cast<size_t>(i)];
    const std::string key = job.file_stem;
    std::string png, record_text;
    try {
      if (on_disk[static_cast<size_t>(i)] == kPacked) {  // another image of this tar was made again
        if (!packed) packed.emplace(out_dir + "/" + first.tar);
        std::optional<std::string> p = packed->find(key + ".png", kMaxImageBytes);
        std::optional<std::string> r = p ? packed->find(key + ".json", kMaxInputFileBytes) : std::nullopt;
        if (!r) fail_input("{}/{}: holds no {}.png and {}.json", out_dir, first.tar, key, key);
        png = std::move(*p);
        record_text = std::move(*r);
      } else {
        png = read_file(out_dir + "/" + job.file(), kMaxImageBytes, false);
        record_text = read_file(out_dir + "/" + job.file(".json"), kMaxInputFileBytes, false);
      }
    } catch (const InputError& e) {
      log.warn("{} is not written: image {} cannot be read ({}); a rerun with --verify-outputs makes what is missing",
               first.tar, i, e.what());
      return false;
    }
    std::optional<ImageRecord> record = ImageRecord::parse(record_text);
    if (!record || record->sha256 != sha256_hex(png)) {
      log.warn("{} is not written: image {} is not the one its record lists; a rerun with --verify-outputs makes it "
               "again",
               first.tar, i);
      return false;
    }
    record->member = TarMember{key + ".png", tar.add(key + ".png", png), std::ssize(png)};
    record->json_member = TarMember{key + ".json", tar.add(key + ".json", record_text), std::ssize(record_text)};
    record->json_sha256 = sha256_hex(record_text);
    record->file = first.tar;
    records.push_back(std::move(*record));
  }
  tar.commit();
  const std::optional<FileStat> st = stat_regular_file(out_dir + "/" + first.tar);
  if (!st) fail("{}/{}: is gone right after it was written", out_dir, first.tar);
  std::vector<nlohmann::json> lines;
  for (ImageRecord& record : records) {
    record.file_stat = *st;
    lines.push_back(record.to_json());
  }
  manifest.append(lines);
  remove_staged(out_dir, jobs, begin, end);
  for (int64_t i = begin; i < end; ++i) on_disk[static_cast<size_t>(i)] = kPacked;
  log.info("{} written: images {}..{}", first.tar, begin, end - 1);
  return true;
}

}  // namespace ditbatch
