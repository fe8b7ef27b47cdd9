// Weights as views of the mapped weight file (WeightAccess::Mapped, the default load): where
// the views lie (the kernel's own list of the process's mappings), that they hold the bytes
// written, that a write through one never reaches the file, that a dropped one leaves the
// process's memory, that a damaged tensor is still refused by name, and what a file cut under
// a run does.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/weight_store.h"
#include "test_util.h"

using namespace ditbatch;
using test::TempDir;

namespace {

// The file a mapping of this process holds `address` in ("" for anonymous memory, "[heap]"), from
// /proc/self/maps: "start-end perms offset dev inode path".
std::string mapped_file_at(const void* address) {
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<uintptr_t>(address);
  for (std::string line; std::getline(maps, line);) {
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    fields >> range >> perms >> offset >> dev >> inode;
    std::getline(fields >> std::ws, path);
    const size_t dash = range.find('-');
    const uintptr_t start = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (at >= start && at < end) return path;
  }
  return "";
}

// A figure of /proc/self/status in KiB ("RssFile:": file pages mapped into this process).
int64_t status_kib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(field.size()));
  return -1;
}

struct Written {
  std::vector<float> big;      // [512, 1024], 2 MiB: page aligned in the file
  std::vector<uint16_t> half;  // [256, 1024] bf16
  std::vector<float> bias;     // [3]: 12 bytes, below the page, may lie anywhere
};

Written write_weights(const std::string& path, int64_t big_rows = 512) {
  Written w;
  w.big = test::random_floats(big_rows * 1024, 11, 2.0f);
  const std::vector<float> half_f32 = test::random_floats(256 * 1024, 12, 2.0f);
  w.half.resize(half_f32.size());
  convert_from_f32(half_f32.data(), w.half.data(), DType::BF16, std::ssize(half_f32));
  w.bias = {0.5f, -1.25f, 3.0f};
  WeightWriter writer(path);
  writer.begin_component("transformer", "{}");
  writer.add_tensor("big.weight", {big_rows, 1024}, DType::F32, w.big.data());
  writer.add_tensor("half.weight", {256, 1024}, DType::BF16, w.half.data());
  writer.add_tensor("small.bias", {3}, DType::F32, w.bias.data());
  writer.end_component();
  writer.finish();
  return w;
}

bool same_bytes(const Tensor& t, const void* expected, size_t bytes) {
  return t.nbytes() == bytes && std::memcmp(t.raw(), expected, bytes) == 0;
}

}  // namespace

TEST(WeightMapping, TensorsAreViewsOfTheFileHoldingTheWrittenBytes) {
  TempDir dir;
  const std::string path = dir / "w.h5";
  const Written w = write_weights(path);
  const std::string real = std::filesystem::canonical(path).string();
  {
    const WeightStore store = WeightStore::open(path, WeightAccess::Mapped);
    const Component c = store.component("transformer");
    // A new file places every dataset of a page or more on a page of its own.
    for (const char* name : {"big.weight", "half.weight"}) {
      const std::optional<h5::RawExtent> extent = c.group().raw_extent(name);
      ASSERT_TRUE(extent) << name;
      EXPECT_EQ(extent->offset % 4096, 0u) << name << " at " << extent->offset;
    }
    const Tensor big = c.tensor("big.weight", {512, 1024});
    const Tensor half = c.tensor("half.weight", {256, 1024});
    EXPECT_EQ(mapped_file_at(big.raw()), real);
    EXPECT_EQ(mapped_file_at(half.raw()), real);
    EXPECT_EQ(half.dtype(), DType::BF16);
    EXPECT_TRUE(same_bytes(big, w.big.data(), w.big.size() * 4));
    EXPECT_TRUE(same_bytes(half, w.half.data(), w.half.size() * 2));
    // Mapped or read, a small tensor holds its values (a view only where its address allows).
    EXPECT_TRUE(same_bytes(c.tensor("small.bias", {3}), w.bias.data(), 12));
  }
  // DITBATCH_NO_MMAP's way: the same bytes, in memory of the process's own.
  const WeightStore store = WeightStore::open(path, WeightAccess::Read);
  const Tensor big = store.component("transformer").tensor("big.weight", {512, 1024});
  EXPECT_NE(mapped_file_at(big.raw()), real);  // anonymous memory or the heap
  EXPECT_TRUE(same_bytes(big, w.big.data(), w.big.size() * 4));
}

TEST(WeightMapping, AWriteThroughAViewNeverReachesTheFile) {
  TempDir dir;
  const std::string path = dir / "w.h5";
  const Written w = write_weights(path);
  const std::string file_before = test::read_text(path);
  {
    const WeightStore store = WeightStore::open(path, WeightAccess::Mapped);
    Tensor big = store.component("transformer").tensor("big.weight", {512, 1024});
    ASSERT_EQ(mapped_file_at(big.raw()), std::filesystem::canonical(path).string());
    for (int64_t i = 0; i < big.numel(); i += 1000) big.data<float>()[i] = 42.0f;  // as a LoRA merge patches
    EXPECT_EQ(big.data<float>()[0], 42.0f);
    // Another store of the same file, mapped while this view is patched, sees the file's bytes.
    const WeightStore again = WeightStore::open(path, WeightAccess::Mapped);
    EXPECT_TRUE(same_bytes(again.component("transformer").tensor("big.weight", {512, 1024}), w.big.data(),
                           w.big.size() * 4));
  }
  EXPECT_EQ(test::read_text(path), file_before);
}

TEST(WeightMapping, ADroppedViewLeavesTheProcessMemory) {
  TempDir dir;
  const std::string path = dir / "w.h5";
  write_weights(path, /*big_rows=*/8192);  // 32 MiB
  const WeightStore store = WeightStore::open(path, WeightAccess::Mapped);
  const Component c = store.component("transformer");
  const int64_t before = status_kib("RssFile:");
  ASSERT_GE(before, 0) << "no RssFile in /proc/self/status";
  std::optional<Tensor> big = c.tensor("big.weight", {8192, 1024});
  const int64_t held = status_kib("RssFile:");
  EXPECT_GE(held - before, 30 * 1024) << "the digest check reads every page of the view";
  big.reset();
  const int64_t after = status_kib("RssFile:");
  EXPECT_LE(after - before, 2 * 1024) << "before " << before << " KiB, held " << held << " KiB, after " << after;
}

TEST(WeightMapping, ADamagedMappedTensorIsRefusedByName) {
  TempDir dir;
  const std::string path = dir / "w.h5";
  write_weights(path);
  uint64_t offset = 0;
  {
    const WeightStore store = WeightStore::open(path, WeightAccess::Mapped);
    offset = store.component("transformer").group().raw_extent("big.weight")->offset;
  }
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset + 123457));
    f.put('\x7f');
  }
  const WeightStore store = WeightStore::open(path, WeightAccess::Mapped);
  const Component c = store.component("transformer");
  const std::string message = test::input_error_of([&] { c.tensor("big.weight", {512, 1024}); });
  EXPECT_NE(message.find("/transformer/big.weight: its bytes do not match the digest recorded"), std::string::npos)
      << message;
  EXPECT_TRUE(same_bytes(c.tensor("small.bias", {3}), std::vector<float>{0.5f, -1.25f, 3.0f}.data(), 12));
}

#if defined(__SANITIZE_ADDRESS__)
#define DITBATCH_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DITBATCH_TEST_ASAN 1
#endif
#endif

// A weight file cut while a run holds views of it: the next read of a page past the new end
// raises SIGBUS, which ends the process naming the file, exit 1 (not a bare "Bus error").
TEST(WeightMapping, AFileCutUnderTheRunEndsItNamingTheFile) {
#ifdef DITBATCH_TEST_ASAN
  GTEST_SKIP() << "AddressSanitizer handles SIGBUS itself (its report replaces ditbatch's message)";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the OpenMP threads of the digest check
  TempDir dir;
  const std::string path = dir / "w.h5";
  write_weights(path);
  EXPECT_EXIT(
      {
        const WeightStore store = WeightStore::open(path, WeightAccess::Mapped);
        Tensor big = store.component("transformer").tensor("big.weight", {512, 1024});
        if (::truncate(path.c_str(), 0) != 0) std::_Exit(3);
        volatile float last = big.data<float>()[big.numel() - 1];
        (void)last;
        std::_Exit(4);  // not reached: the page is gone
      },
      testing::ExitedWithCode(1), "ditbatch: error: .*/w[.]h5: the weight file changed under the run");
#endif
}
