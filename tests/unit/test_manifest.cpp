// The manifest as resume and the merge read it: lines streamed one at a time, the last line per
// index winning (manifest.jsonl, then the parts oldest first), torn and foreign lines skipped;
// the merge folds finished parts in by copying each index's last line as written.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <vector>

#include "io/manifest.h"
#include "test_util.h"

using namespace ditbatch;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

void set_mtime(const std::string& path, time_t seconds) {
  const timespec times[2] = {{seconds, 0}, {seconds, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

}  // namespace

TEST(Manifest, TheLastLinePerIndexWinsAndTheMergeCopiesItAsWritten) {
  TempDir dir;
  const std::string out = dir / "out";
  fs::create_directories(out + "/.manifest");
  // manifest.jsonl: out of order, a torn line, lines that are no image's (an array, a string index)
  test::write_text(out + "/manifest.jsonl",
                   "{\"index\":2,\"status\":\"ok\",\"file\":\"c.png\"}\n"
                   "{\"index\":0,\"status\":\"failed\",\"error\":\"NaN\"}\n"
                   "{\"index\":5,\"stat\n"
                   "[1,2]\n"
                   "{\"index\":\"3\",\"status\":\"ok\"}\n");
  // an older part re-makes 0 and adds 1; a newer one re-makes 0 again (spaces kept as written)
  // and was killed in the middle of a line
  test::write_text(out + "/.manifest/runA-rank00000.jsonl",
                   "{\"index\":0,\"status\":\"ok\",\"file\":\"a-old.png\"}\n"
                   "{\"index\":1,\"status\":\"ok\",\"file\":\"b.png\",\"timings\":{\"total_s\":1.5}}\n");
  test::write_text(out + "/.manifest/runB-rank00000.jsonl",
                   "{\"index\": 0, \"status\": \"ok\", \"file\": \"a.png\"}\n{\"index\":4,\"sta");
  set_mtime(out + "/.manifest/runA-rank00000.jsonl", 1700000000);
  set_mtime(out + "/.manifest/runB-rank00000.jsonl", 1700000100);
  // a part whose writer is alive (it holds the lock): read, and kept
  const std::string live = out + "/.manifest/runC-rank00001.jsonl";
  test::write_text(live, "{\"index\":7,\"status\":\"ok\",\"file\":\"h.png\"}\n");
  set_mtime(live, 1700000200);
  const int live_fd = ::open(live.c_str(), O_RDONLY);
  ASSERT_GE(live_fd, 0);
  ASSERT_EQ(::flock(live_fd, LOCK_EX), 0);

  std::vector<std::pair<int64_t, std::string>> visited;
  for_each_manifest_line(out, [&](int64_t index, const nlohmann::json& line) {
    visited.emplace_back(index, line.value("file", ""));
  });
  const std::vector<std::pair<int64_t, std::string>> order = {{2, "c.png"},     {0, ""},      {0, "a-old.png"},
                                                              {1, "b.png"},     {0, "a.png"}, {7, "h.png"}};
  EXPECT_EQ(visited, order);
  // Only the fields asked for (and the index) are kept.
  for_each_manifest_line(
      out,
      [&](int64_t index, const nlohmann::json& line) {
        if (index == 1) {
          EXPECT_EQ(line, nlohmann::json::parse("{\"index\":1,\"file\":\"b.png\"}"));
        }
      },
      {"file"});
  // The last line of each index, in index order, as the merge below keeps it and as
  // read_manifest holds it; with `fields`, only those.
  using Lines = std::vector<std::pair<int64_t, nlohmann::json>>;
  Lines last;
  for_each_last_manifest_line(out, [&](int64_t index, const nlohmann::json& line) { last.emplace_back(index, line); });
  const std::map<int64_t, nlohmann::json> held = read_manifest(out);
  EXPECT_EQ(last, Lines(held.begin(), held.end()));
  const std::vector<int64_t> indices = {0, 1, 2, 7};
  ASSERT_EQ(last.size(), indices.size());
  for (size_t i = 0; i < last.size(); ++i) EXPECT_EQ(last[i].first, indices[i]);
  EXPECT_EQ(last[0].second.value("file", ""), "a.png");
  last.clear();
  for_each_last_manifest_line(
      out, [&](int64_t index, const nlohmann::json& line) { last.emplace_back(index, line); }, {"status"});
  ASSERT_EQ(last.size(), 4u);
  EXPECT_EQ(last[1].second, nlohmann::json::parse("{\"index\":1,\"status\":\"ok\"}"));

  bool folded = false;
  EXPECT_EQ(merge_manifest(out, &folded), 4u);
  EXPECT_TRUE(folded);
  EXPECT_EQ(test::read_text(out + "/manifest.jsonl"),
            "{\"index\": 0, \"status\": \"ok\", \"file\": \"a.png\"}\n"
            "{\"index\":1,\"status\":\"ok\",\"file\":\"b.png\",\"timings\":{\"total_s\":1.5}}\n"
            "{\"index\":2,\"status\":\"ok\",\"file\":\"c.png\"}\n"
            "{\"index\":7,\"status\":\"ok\",\"file\":\"h.png\"}\n");
  EXPECT_FALSE(fs::exists(out + "/.manifest/runA-rank00000.jsonl"));
  EXPECT_FALSE(fs::exists(out + "/.manifest/runB-rank00000.jsonl"));
  EXPECT_TRUE(fs::exists(live)) << "a live writer's part is kept";
  ::close(live_fd);

  // Merged again once the writer is gone: its part goes, the lines stay.
  EXPECT_EQ(merge_manifest(out, &folded), 4u);
  EXPECT_TRUE(folded);
  EXPECT_FALSE(fs::exists(out + "/.manifest"));
  // With no part left, the manifest is not rewritten.
  struct stat before {}, after {};
  ASSERT_EQ(::stat((out + "/manifest.jsonl").c_str(), &before), 0);
  EXPECT_EQ(merge_manifest(out, &folded), 4u);
  EXPECT_FALSE(folded);
  ASSERT_EQ(::stat((out + "/manifest.jsonl").c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_EQ(read_manifest(out).size(), 4u);
}

TEST(Manifest, AFolderWithoutOneGetsAnEmptyManifest) {
  TempDir dir;
  fs::create_directories(dir / "out");
  bool folded = true;
  EXPECT_EQ(merge_manifest(dir / "out", &folded), 0u);
  EXPECT_FALSE(folded);
  EXPECT_EQ(test::read_text(dir / "out/manifest.jsonl"), "");
}
