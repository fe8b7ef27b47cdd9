// Resume in O(metadata): a rerun trusts a listed image whose size, mtime, inode and device are
// those its manifest line records, without reading it; one whose stat differs is hashed (and
// made again when its bytes changed); --verify-outputs and `ditbatch verify` hash everything.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/sha256.h"
#include "io/manifest.h"
#include "test_util.h"
#include "tiny_model.h"

using namespace ditbatch;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

// 128x128 images: each PNG is tens of KB, many times the bytes of its manifest line (which a
// rerun reads a few times), so that reading even one of them shows in the count below.
std::string generate_cmd(const std::string& out, const std::string& extra) {
  return fmt::format("{} generate --weights {} --out {} --width 128 --height 128 --steps 2 --threads 1 {}",
                     test::exe(), test::tiny_model(), out, extra);
}

const std::string kPrompts = "--prompt 'a lighthouse' --prompt 'a forest' --prompt 'a city' --prompt 'a harbour'";
const std::string kFirstPrompt = "--prompt 'a lighthouse'";

struct CountedRun {
  int status = -1;
  int64_t rchar = -1;  // bytes the process got from read() and its kin, from any file
  std::string output;
};

// Runs a command and reads the bytes it read from /proc/PID/io once it has ended but before it
// is reaped (waitid with WNOWAIT keeps it a zombie, whose counters stay readable): the kernel's
// own count, whatever the process read through (read, pread, stdio, HDF5).
CountedRun run_counting_reads(const std::string& command, const std::string& log) {
  CountedRun r;
  const std::string line = "exec " + command + " > " + log + " 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", line.c_str(), nullptr);
    _exit(127);
  }
  siginfo_t info{};
  if (waitid(P_PID, pid, &info, WEXITED | WNOWAIT) == 0) {
    std::ifstream io(fmt::format("/proc/{}/io", pid));
    std::string key;
    int64_t value = 0;
    while (io >> key >> value)
      if (key == "rchar:") r.rchar = value;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.output = test::read_text(log);
  return r;
}

int64_t mtime_ns(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

ino_t inode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_ino;
}

void set_mtime_ns(const std::string& path, int64_t ns) {
  const timespec times[2] = {{0, UTIME_OMIT}, {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
  ASSERT_EQ(mtime_ns(path), ns) << path;
}

// Rewrites a file in place (same inode, as an editor that saves in place or a bit flip does).
void rewrite_in_place(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

std::string with_byte_flipped(std::string bytes, size_t at) {
  bytes[at] = static_cast<char>(bytes[at] ^ 0x5A);
  return bytes;
}

}  // namespace

// The count cannot pass by accident: the same rerun with --verify-outputs, which must read every
// PNG once, shows at least their bytes in the same counter; and a rerun over four finished
// images must read less than one PNG more than a rerun over one (only manifest lines differ).
TEST(ResumeByStat, ARerunOverFinishedImagesReadsNoImageBytes) {
  TempDir dir;
  ASSERT_EQ(test::run(generate_cmd(dir / "all", kPrompts)).status, 0);
  ASSERT_EQ(test::run(generate_cmd(dir / "one", kFirstPrompt)).status, 0);
  const auto names = test::pngs_in(dir / "all");
  ASSERT_EQ(names.size(), 4u);
  int64_t png_bytes = 0, smallest = INT64_MAX;
  for (const auto& name : names) {
    const auto size = static_cast<int64_t>(fs::file_size(dir / ("all/" + name)));
    png_bytes += size;
    smallest = std::min(smallest, size);
  }
  const auto lines = read_manifest(dir / "all");
  ASSERT_EQ(lines.size(), 4u);
  for (const auto& [index, line] : lines) {  // the stat is recorded as the file has it
    const std::string png = dir / ("all/" + line["file"].get<std::string>());
    EXPECT_EQ(line["file_stat"]["size"], fs::file_size(png));
    EXPECT_EQ(line["file_stat"]["mtime_ns"], mtime_ns(png));
    EXPECT_EQ(line["file_stat"]["inode"], inode(png));
  }
  // The manifest a rerun reads several times: its share of the difference below.
  const auto manifest_bytes = static_cast<int64_t>(fs::file_size(dir / "all/manifest.jsonl"));
  ASSERT_LT(4 * manifest_bytes, smallest) << "the images must be larger than the manifest reads for the count to tell";

  const CountedRun all = run_counting_reads(generate_cmd(dir / "all", kPrompts), dir / "all.log");
  const CountedRun one = run_counting_reads(generate_cmd(dir / "one", kFirstPrompt), dir / "one.log");
  const CountedRun verify =
      run_counting_reads(generate_cmd(dir / "all", kPrompts + " --verify-outputs"), dir / "verify.log");
  ASSERT_EQ(all.status, 0) << all.output;
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(verify.status, 0) << verify.output;
  EXPECT_NE(all.output.find("0 done, 4 skipped"), std::string::npos) << all.output;
  EXPECT_NE(verify.output.find("0 done, 4 skipped"), std::string::npos) << verify.output;
  ASSERT_GT(all.rchar, 0);
  ASSERT_GT(one.rchar, 0);
  EXPECT_GE(verify.rchar - all.rchar, png_bytes) << "verifying reads every PNG: the counter sees image reads";
  EXPECT_LT(all.rchar - one.rchar, smallest) << "a rerun over 4 finished images read " << all.rchar
                                             << " bytes, over 1 " << one.rchar << "; a PNG is " << smallest
                                             << " bytes or more";
}

// A copied folder (new inodes and mtimes) is hashed once: the rerun that found its images whole
// by their sha256 records the stat they have now, so the next rerun reads none of them.
TEST(ResumeByStat, ACopiedFolderIsHashedOnceThenTrustedByItsNewStat) {
  TempDir dir;
  ASSERT_EQ(test::run(generate_cmd(dir / "all", kPrompts)).status, 0);
  fs::copy(dir / "all", dir / "copy", fs::copy_options::recursive);
  int64_t png_bytes = 0;
  for (const auto& name : test::pngs_in(dir / "copy")) png_bytes += static_cast<int64_t>(fs::file_size(dir / ("copy/" + name)));
  const CountedRun first = run_counting_reads(generate_cmd(dir / "copy", kPrompts), dir / "first.log");
  const CountedRun second = run_counting_reads(generate_cmd(dir / "copy", kPrompts), dir / "second.log");
  ASSERT_EQ(first.status, 0) << first.output;
  ASSERT_EQ(second.status, 0) << second.output;
  EXPECT_NE(first.output.find("0 done, 4 skipped"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("4 image(s) whole by their sha256, though their stat is not the one listed"),
            std::string::npos)
      << first.output;
  EXPECT_NE(second.output.find("0 done, 4 skipped"), std::string::npos) << second.output;
  EXPECT_EQ(second.output.find("whole by their sha256"), std::string::npos) << second.output;
  EXPECT_GE(first.rchar - second.rchar, png_bytes) << "the first rerun hashes every PNG, the second none";
  const auto lines = read_manifest(dir / "copy");
  ASSERT_EQ(lines.size(), 4u);
  for (const auto& [index, line] : lines) {  // the copy's own stat, one line per image
    const std::string png = dir / ("copy/" + line["file"].get<std::string>());
    EXPECT_EQ(line["file_stat"]["inode"], inode(png));
    EXPECT_EQ(line["file_stat"]["mtime_ns"], mtime_ns(png));
    EXPECT_EQ(line["sha256"], sha256_hex(test::read_text(png)));
  }
  EXPECT_EQ(test::run(fmt::format("{} verify {}", test::exe(), dir / "copy")).status, 0);
}

TEST(ResumeByStat, AFileEditedInPlaceIsMadeAgainAndVerifyCatchesWhatStatCannot) {
  TempDir dir;
  ASSERT_EQ(test::run(generate_cmd(dir / "out", kPrompts)).status, 0);
  const auto names = test::pngs_in(dir / "out");
  ASSERT_EQ(names.size(), 4u);
  std::map<std::string, std::string> original;
  for (const auto& name : names) original[name] = test::read_text(dir / ("out/" + name));
  const std::string a = dir / ("out/" + names[0]), b = dir / ("out/" + names[1]), c = dir / ("out/" + names[2]),
                    d = dir / ("out/" + names[3]);
  const int64_t a_mtime = mtime_ns(a), c_mtime = mtime_ns(c);
  const ino_t c_inode = inode(c);

  // a: cut by one byte, its mtime put back: the size tells. b: one byte changed, the same size,
  // its mtime moved on (as any write moves it): the mtime tells. Both are hashed and made again.
  rewrite_in_place(a, original[names[0]].substr(0, original[names[0]].size() - 1));
  set_mtime_ns(a, a_mtime);
  rewrite_in_place(b, with_byte_flipped(original[names[1]], original[names[1]].size() / 2));
  set_mtime_ns(b, mtime_ns(b) + 1000000);  // a later mtime, however coarse the file system's clock
  // c: one byte changed, the same size, inode and mtime: no stat can tell; only hashing does.
  rewrite_in_place(c, with_byte_flipped(original[names[2]], original[names[2]].size() / 2));
  set_mtime_ns(c, c_mtime);
  ASSERT_EQ(inode(c), c_inode);
  // d: touched, its bytes unchanged: the stat differs, the hash matches, it is kept.
  set_mtime_ns(d, mtime_ns(d) + 1000000000);

  auto rerun = test::run(generate_cmd(dir / "out", kPrompts));
  ASSERT_EQ(rerun.status, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("2 done, 2 skipped"), std::string::npos) << rerun.output;
  EXPECT_EQ(test::read_text(a), original[names[0]]);
  EXPECT_EQ(test::read_text(b), original[names[1]]);
  EXPECT_NE(test::read_text(c), original[names[2]]) << "a same-stat edit is not seen without hashing";
  EXPECT_EQ(test::read_text(d), original[names[3]]);

  auto verify = test::run(fmt::format("{} verify {}", test::exe(), dir / "out"));
  EXPECT_EQ(verify.status, 1) << verify.output;
  EXPECT_NE(verify.output.find(names[2] + ": image 2: its bytes (sha256 " +
                               sha256_hex(test::read_text(c)).substr(0, 12) + ") differ"),
            std::string::npos)
      << verify.output;
  EXPECT_NE(verify.output.find("3 of 4 image(s) listed as made match"), std::string::npos) << verify.output;
  for (const std::string& kept : {names[0], names[1], names[3]})
    EXPECT_EQ(verify.output.find(kept), std::string::npos) << verify.output;

  auto verified = test::run(generate_cmd(dir / "out", kPrompts + " --verify-outputs --log-level debug"));
  ASSERT_EQ(verified.status, 0) << verified.output;
  EXPECT_NE(verified.output.find("1 done, 3 skipped"), std::string::npos) << verified.output;
  // The input check, the verification and the run share one open of the weight file.
  EXPECT_NE(verified.output.find(test::tiny_model() + ": opened 1 time(s) by this rank"), std::string::npos)
      << verified.output;
  EXPECT_NE(verified.output.find(names[2] + ": its bytes differ from the sha256 the manifest lists"), std::string::npos)
      << verified.output;
  EXPECT_EQ(test::read_text(c), original[names[2]]);

  auto clean = test::run(fmt::format("{} verify {}", test::exe(), dir / "out"));
  EXPECT_EQ(clean.status, 0) << clean.output;
  EXPECT_NE(clean.output.find("4 of 4 image(s) listed as made match"), std::string::npos) << clean.output;
  fs::remove(d);
  auto missing = test::run(fmt::format("{} verify {}", test::exe(), dir / "out"));
  EXPECT_EQ(missing.status, 1) << missing.output;
  EXPECT_NE(missing.output.find(names[3] + ": image 3: is missing"), std::string::npos) << missing.output;
}

// A manifest of an older ditbatch lists no stat: its images are hashed, as before, and a
// changed one is made again.
TEST(ResumeByStat, ALineWithoutAStatIsHashed) {
  TempDir dir;
  ASSERT_EQ(test::run(generate_cmd(dir / "out", kPrompts)).status, 0);
  std::string old_manifest;
  for (auto [index, line] : read_manifest(dir / "out")) {
    line.erase("file_stat");
    old_manifest += line.dump() + "\n";
  }
  test::write_text(dir / "out/manifest.jsonl", old_manifest);
  const auto names = test::pngs_in(dir / "out");
  const std::string png = dir / ("out/" + names[1]);
  const std::string bytes = test::read_text(png);
  const int64_t mtime = mtime_ns(png);
  rewrite_in_place(png, with_byte_flipped(bytes, bytes.size() / 2));
  set_mtime_ns(png, mtime);
  auto rerun = test::run(generate_cmd(dir / "out", kPrompts));
  ASSERT_EQ(rerun.status, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("1 done, 3 skipped"), std::string::npos) << rerun.output;
  EXPECT_EQ(test::read_text(png), bytes);
  EXPECT_TRUE(read_manifest(dir / "out").at(1).contains("file_stat")) << "the line made again records its stat";
}
