// The safetensors reader: valid single and sharded files, and every malformed header.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "io/safetensors.h"
#include "test_util.h"

using namespace ditbatch;
using test::TempDir;

namespace {

std::string error_of(const std::string& path) {
  return test::input_error_of([&] { SafetensorsFile::open(path); });
}

// A file whose header is `header` (raw JSON text) followed by `data_bytes` bytes.
std::string raw_file(const std::string& header, size_t data_bytes, uint64_t claimed_len = UINT64_MAX) {
  uint64_t n = claimed_len == UINT64_MAX ? header.size() : claimed_len;
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + std::string(data_bytes, '\x01');
}

}  // namespace

TEST(Safetensors, ReadsTensorsAndMetadata) {
  TempDir dir;
  std::vector<float> a = test::random_floats(6, 3);
  std::vector<uint16_t> b = {0x3f80, 0xc000, 0x4049};
  std::string b_bytes(reinterpret_cast<const char*>(b.data()), 6);
  test::write_text(dir / "m.safetensors",
                   test::safetensors_bytes({{"z.weight", "F32", {2, 3}, test::f32_bytes(a)}, {"a.bias", "BF16", {3}, b_bytes}},
                                           {{"format", "pt"}}));
  auto f = SafetensorsFile::open(dir / "m.safetensors");
  ASSERT_EQ(f->entries().size(), 2u);
  EXPECT_EQ(f->entries()[0].name, "a.bias");  // sorted by name
  EXPECT_EQ(f->metadata()["format"], "pt");
  const SafetensorsEntry* z = f->find("z.weight");
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->dtype, DType::F32);
  EXPECT_EQ(z->shape, (Shape{2, 3}));
  EXPECT_EQ(std::memcmp(f->data(*z), a.data(), 24), 0);
  EXPECT_EQ(std::memcmp(f->data(*f->find("a.bias")), b.data(), 6), 0);
  EXPECT_EQ(f->find("nope"), nullptr);
}

TEST(Safetensors, MalformedHeadersAreClearErrors) {
  TempDir dir;
  auto check = [&](const std::string& bytes, const std::string& expected) {
    test::write_text(dir / "bad.safetensors", bytes);
    std::string msg = error_of(dir / "bad.safetensors");
    EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find(expected), std::string::npos) << "expected '" << expected << "' in: " << msg;
  };
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  check("abc", "truncated: 3 bytes");
  check(raw_file(ok, 8, 1000), "header length 1000 exceeds the file size");
  check(raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 8), "header is not valid JSON");
  check(raw_file(R"([1, 2, 3])", 0), "header must be a JSON object");
  check(raw_file(R"({"w":{"dtype":"F32","shape":[2]}})", 8), "must have dtype, shape and data_offsets");
  check(raw_file(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8), "unsupported dtype 'Q4'");
  check(raw_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "non-negative integers");
  check(raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8), "run past the data section");
  check(raw_file(ok, 4), "run past the data section of 4 bytes");
  check(raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "but F32 [3] needs 12 bytes");
  check(raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "are reversed");
  check(raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8), "must be two non-negative integers");
  check(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                 12),
        "overlap");
}

TEST(Safetensors, ShardedIndex) {
  TempDir dir;
  std::vector<float> a = test::random_floats(4, 1), b = test::random_floats(2, 2);
  test::write_text(dir / "m-00001-of-00002.safetensors", test::safetensors_bytes({{"a", "F32", {4}, test::f32_bytes(a)}}));
  test::write_text(dir / "m-00002-of-00002.safetensors", test::safetensors_bytes({{"b", "F32", {2}, test::f32_bytes(b)}}));
  test::write_text(dir / "m.safetensors.index.json",
                   R"({"metadata":{"total_size":24},"weight_map":{"a":"m-00001-of-00002.safetensors","b":"m-00002-of-00002.safetensors"}})");
  SafetensorsSet set = SafetensorsSet::open_dir(dir.path());
  ASSERT_EQ(set.items().size(), 2u);
  EXPECT_EQ(set.items()[1].entry->name, "b");
  EXPECT_EQ(std::memcmp(set.items()[1].file->data(*set.items()[1].entry), b.data(), 8), 0);
  EXPECT_EQ(set.total_bytes(), 24u);

  auto index_error = [&](const std::string& index) {
    test::write_text(dir / "m.safetensors.index.json", index);
    try {
      SafetensorsSet::open_dir(dir.path());
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no InputError)");
  };
  EXPECT_NE(index_error(R"({"weight_map":{"a":"m-00001-of-00002.safetensors","b":"m-00009.safetensors"}})")
                .find("shard 'm-00009.safetensors' (for tensor 'b') does not exist"),
            std::string::npos);
  EXPECT_NE(index_error(R"({"weight_map":{"a":"m-00001-of-00002.safetensors","c":"m-00002-of-00002.safetensors"}})")
                .find("tensor 'c' is listed in m-00002-of-00002.safetensors but that shard does not hold it"),
            std::string::npos);
  EXPECT_NE(index_error(R"({"weight_map":{"a":"m-00001-of-00002.safetensors"}})").find("(no InputError)"),
            std::string::npos);  // b's shard is never opened: nothing is lost that the index does not name
  EXPECT_NE(index_error(R"({"metadata":{}})").find("missing the \"weight_map\""), std::string::npos);
  EXPECT_NE(index_error("{not json").find("not valid JSON"), std::string::npos);
}
