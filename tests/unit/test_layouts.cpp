// Output layouts. --layout sharded: images in subfolders of 10,000 consecutive indices
// ("00001/000012345-x.png"), the same bytes as the flat layout's, resumed, verified, reported and
// swept like them, and no subfolder or listed name that leads outside --out.
// --output-format webdataset: tar shards of consecutive samples (KEY.png + KEY.json), read back
// with Python's tarfile (tests/webdataset/check_tars.py), the same PNG bytes as the flat layout,
// resumed per tar after a stop, a kill -9 or a tar that could not be written, verified and
// summed up like any folder.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "core/fs.h"
#include "core/sha256.h"
#include "io/manifest.h"
#include "io/png_io.h"
#include "io/tar_archive.h"
#include "pipeline/output_check.h"
#include "pipeline/output_layout.h"
#include "test_util.h"
#include "tiny_model.h"

using namespace ditbatch;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string generate_cmd(const std::string& out, const std::string& extra) {
  return fmt::format("{} generate --weights {} --out {} --width 64 --height 48 --steps 4 --threads 1 {}", test::exe(),
                     test::tiny_model(), out, extra);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Every regular file under dir, as a path relative to it ("00001/000010000-x.png").
std::set<std::string> files_under(const std::string& dir) {
  std::set<std::string> found;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) found.insert(fs::relative(e.path(), dir).string());
  return found;
}

// 10,002 prompts "scene number i": the slice 2499 of 2500 is images 9998..10001 (slices are
// contiguous, the first n % count one image longer), across the first folder boundary.
std::string boundary_prompts(const TempDir& dir) {
  std::string text;
  for (int i = 0; i < 10002; ++i) text += fmt::format("scene number {}\n", i);
  test::write_text(dir / "p.txt", text);
  return "--prompts " + (dir / "p.txt") + " --array-index 2499 --array-count 2500";
}

// check_tars.py OUT N K [REF]: exit 0 when the folder holds the N samples as documented.
test::CommandResult check_tars(const std::string& out, int n, int k, const std::string& reference = "") {
  return test::run(fmt::format("python3 {}/webdataset/check_tars.py {} {} {} {}", DITBATCH_TESTS_DIR, out, n, k,
                               reference));
}

std::string prompts_file(const TempDir& dir, int n, int slow = -1) {
  std::string jsonl;
  for (int i = 0; i < n; ++i)
    jsonl += fmt::format("{{\"prompt\": \"sample number {}\"{}}}\n", i,
                         i == slow ? ", \"steps\": 1000, \"width\": 128, \"height\": 128" : "");
  test::write_text(dir / "p.jsonl", jsonl);
  return "--prompts " + (dir / "p.jsonl");
}

}  // namespace

// The layout's names, as the option documents them: the index in nine digits in the folder of
// index / 10000 in five; flat names keep their six digits.
TEST(Layout, ShardedImagesAreTheFlatImagesInFoldersOfTenThousand) {
  TempDir dir;
  const std::string prompts = boundary_prompts(dir);
  auto flat = test::run(generate_cmd(dir / "flat", prompts));
  ASSERT_EQ(flat.status, 0) << flat.output;
  auto sharded = test::run(generate_cmd(dir / "sharded", prompts + " --layout sharded"));
  ASSERT_EQ(sharded.status, 0) << sharded.output;

  std::set<std::string> pngs;
  for (const std::string& f : files_under(dir / "sharded"))
    if (f.ends_with(".png")) pngs.insert(f);
  std::set<std::string> expected;
  for (int i = 9998; i <= 10001; ++i) expected.insert(fmt::format("{:05d}/{:09d}-scene-number-{}.png", i / 10000, i, i));
  EXPECT_EQ(pngs, expected);
  // The same pixels and text chunks: nothing in a PNG depends on where it lies.
  for (int i = 9998; i <= 10001; ++i)
    EXPECT_EQ(test::read_text(dir / fmt::format("sharded/{:05d}/{:09d}-scene-number-{}.png", i / 10000, i, i)),
              test::read_text(dir / fmt::format("flat/{:06d}-scene-number-{}.png", i, i)))
        << i;
  // The manifest names each image by its path inside --out, with the sha256 of its bytes.
  const auto manifest = read_manifest(dir / "sharded");
  ASSERT_EQ(manifest.size(), 4u);
  for (const auto& [index, line] : manifest) {
    const std::string file = fmt::format("{:05d}/{:09d}-scene-number-{}.png", index / 10000, index, index);
    EXPECT_EQ(line["file"], file);
    EXPECT_EQ(line["sha256"], sha256_hex(test::read_text(dir / ("sharded/" + file))));
  }

  // A rerun skips them, reading no image; one removed is made again, in its folder.
  auto again = test::run(generate_cmd(dir / "sharded", prompts + " --layout sharded"));
  EXPECT_TRUE(has(again.output, "0 done, 4 skipped, 0 failed")) << again.output;
  fs::remove(dir / "sharded/00001/000010000-scene-number-10000.png");
  auto resumed = test::run(generate_cmd(dir / "sharded", prompts + " --layout sharded"));
  EXPECT_TRUE(has(resumed.output, "1 done, 3 skipped, 0 failed")) << resumed.output;
  EXPECT_EQ(test::read_text(dir / "sharded/00001/000010000-scene-number-10000.png"),
            test::read_text(dir / "flat/010000-scene-number-10000.png"));

  // verify and the report read the subfolders.
  auto verified = test::run(fmt::format("{} verify --out {}", test::exe(), dir / "sharded"));
  EXPECT_EQ(verified.status, 0) << verified.output;
  EXPECT_TRUE(has(verified.output, "4 of 4 image(s) listed as made match their sha256")) << verified.output;
  test::write_text(dir / "sharded/00000/000009999-scene-number-9999.png", "edited");
  auto caught = test::run(fmt::format("{} verify --out {}", test::exe(), dir / "sharded"));
  EXPECT_NE(caught.status, 0) << caught.output;
  EXPECT_TRUE(has(caught.output, "00000/000009999-scene-number-9999.png: image 9999")) << caught.output;
  // inspect sums a folder up from its manifest and a stat of each listed file.
  auto inspected = test::run(fmt::format("{} inspect {}", test::exe(), dir / "sharded"));
  EXPECT_EQ(inspected.status, 0) << inspected.output;
  EXPECT_TRUE(has(inspected.output, "images listed: 4 (4 ok, 0 failed), indices 9998..10001")) << inspected.output;
  EXPECT_TRUE(has(inspected.output, "layout: sharded (2 subfolder(s): 00000..00001)")) << inspected.output;
  EXPECT_TRUE(has(inspected.output, "3 as listed (size, mtime, inode, device), 1 with another stat")) << inspected.output;
  EXPECT_TRUE(has(inspected.output, "64x48, 4 steps, cfg 4.0 (4)")) << inspected.output;
  auto inspected_flat = test::run(fmt::format("{} inspect {}", test::exe(), dir / "flat"));
  EXPECT_TRUE(has(inspected_flat.output, "layout: flat")) << inspected_flat.output;
  EXPECT_TRUE(has(inspected_flat.output, "4 as listed (size, mtime, inode, device)\n")) << inspected_flat.output;
  const std::string page = test::read_text(dir / "sharded/report.html");
  EXPECT_TRUE(has(page, "\"00001/000010001-scene-number-10001.png\"")) << "the report lists the images by their path";

  // Another layout for the same folder is another file per image: refused, the folder left alone.
  const auto before = files_under(dir / "sharded");
  auto other = test::run(generate_cmd(dir / "sharded", prompts));
  EXPECT_EQ(other.status, 2) << other.output;
  EXPECT_TRUE(has(other.output, "now 009998-scene-number-9998.png")) << other.output;
  EXPECT_EQ(files_under(dir / "sharded"), before);
}

TEST(Layout, AnUnknownLayoutIsRefusedBeforeTheFolderIsMade) {
  TempDir dir;
  auto r = test::run(generate_cmd(dir / "out", "--prompt x --layout tree"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "--layout 'tree' (expected flat or sharded)")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// What a manifest's "file" may name: a plain name or one in a five-digit folder; nothing that
// climbs out, goes deeper, or names an absolute path.
TEST(Layout, OnlyNamesInsideTheFolderOrItsSubfoldersAreOutputs) {
  for (const char* good : {"000001-x.png", "00000/000000001-x.png", "12345/a b.png", "123456/x.png"}) EXPECT_TRUE(is_output_name(good)) << good;
  for (const char* bad : {"", ".", "..", "/etc/shadow", "../x.png", "00000/../../x.png", "00000/..", "0000/x.png",
                          "0000000000000/x.png", "0000a/x.png", "00000/sub/x.png", "00000/", "/00000/x.png"})
    EXPECT_FALSE(is_output_name(bad)) << bad;
}

// A subfolder planted as a symbolic link (the folder may be writable by others) is never
// written through, and a listed image inside one never counts as complete.
TEST(Layout, ASubfolderThatIsALinkIsRefusedAndNeverFollowed) {
  TempDir dir;
  fs::create_directories(dir / "elsewhere");
  fs::create_directories(dir / "out");
  fs::create_directory_symlink(dir / "elsewhere", dir / "out/00000");
  auto r = test::run(generate_cmd(dir / "out", "--prompt 'a fox' --layout sharded"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "out/00000 is a symbolic link, where the run keeps a folder of images (sharded, or a tar's staged ones); remove it"))
      << r.output;
  EXPECT_TRUE(fs::is_empty(dir / "elsewhere"));

  // The same image made in a real folder, then the folder swapped for a link to a copy: the
  // listed stat and sha256 match the copy, but nothing behind a link is an output.
  fs::remove(dir / "out/00000");
  ASSERT_EQ(test::run(generate_cmd(dir / "out", "--prompt 'a fox' --layout sharded")).status, 0);
  fs::copy(dir / "out/00000", dir / "elsewhere", fs::copy_options::recursive);
  const auto line = read_manifest(dir / "out").at(0);
  EXPECT_TRUE(listed_file_is_whole(dir / "out", line, ListedFile::Image, OutputTrust::Hash));
  fs::remove_all(dir / "out/00000");
  fs::create_directory_symlink(dir / "elsewhere", dir / "out/00000");
  EXPECT_FALSE(listed_file_is_whole(dir / "out", line, ListedFile::Image, OutputTrust::Hash));
  EXPECT_FALSE(listed_file_is_whole(dir / "out", line, ListedFile::Image, OutputTrust::Stat));
  auto verified = test::run(fmt::format("{} verify --out {}", test::exe(), dir / "out"));
  EXPECT_NE(verified.status, 0) << verified.output;
  EXPECT_TRUE(has(verified.output, "is not a file of the folder")) << verified.output;
}

// kill -9 mid-run: no partial PNG in any subfolder, the temporary of a killed writer in a
// subfolder is swept at the next start, and the resumed folder holds the uninterrupted bytes.
TEST(Layout, AKilledShardedRunResumesToTheSameBytes) {
  TempDir dir;
  // Image 2 is slow (1000 steps at 128²): killed once two PNGs exist, the run is inside it.
  std::string jsonl;
  for (int i = 0; i < 5; ++i)
    jsonl += fmt::format("{{\"prompt\": \"scene number {}\"{}}}\n", i,
                         i == 2 ? ", \"steps\": 1000, \"width\": 128, \"height\": 128" : "");
  test::write_text(dir / "p.jsonl", jsonl);
  const std::string prompts = "--layout sharded --prompts " + (dir / "p.jsonl");
  ASSERT_EQ(test::run(generate_cmd(dir / "ref", prompts)).status, 0);

  test::Child run(generate_cmd(dir / "out", prompts), dir / "log.txt");
  const bool two = run.wait_until([&] { return fs::is_directory(dir / "out/00000") && test::pngs_in(dir / "out/00000").size() >= 2; });
  run.signal(SIGKILL);
  const int status = run.wait();
  ASSERT_TRUE(two) << "no two PNGs: " << test::read_text(dir / "log.txt");
  ASSERT_TRUE(WIFSIGNALED(status)) << test::read_text(dir / "log.txt");
  const auto partial = test::pngs_in(dir / "out/00000");
  EXPECT_LT(partial.size(), 5u) << "the run finished before the kill; the test proves nothing";
  for (const auto& name : partial) EXPECT_TRUE(png_is_complete(dir / ("out/00000/" + name))) << name;

  // A writer killed while it wrote a PNG of the subfolder (no destructor ran) left its temporary.
  const pid_t writer = fork();
  if (writer == 0) {
    TempFile tmp(dir / "out/00000/000000004-scene-number-4.png");
    tmp.write("partial", 7);
    _exit(0);
  }
  int writer_status = 0;
  waitpid(writer, &writer_status, 0);

  auto resumed = test::run(generate_cmd(dir / "out", prompts));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_TRUE(has(resumed.output, "(left by a killed writer)")) << resumed.output;
  std::set<std::string> out_pngs, ref_pngs;
  for (const std::string& f : files_under(dir / "out")) {
    EXPECT_FALSE(has(f, ".tmp.")) << f;
    if (f.ends_with(".png")) out_pngs.insert(f);
  }
  for (const std::string& f : files_under(dir / "ref"))
    if (f.ends_with(".png")) ref_pngs.insert(f);
  EXPECT_EQ(out_pngs, ref_pngs);
  EXPECT_EQ(out_pngs.size(), 5u);
  for (const std::string& f : ref_pngs) EXPECT_EQ(test::read_text(dir / ("out/" + f)), test::read_text(dir / ("ref/" + f))) << f;
  const auto manifest = read_manifest(dir / "out");
  EXPECT_EQ(manifest.size(), 5u);
  for (const auto& [i, line] : manifest) EXPECT_EQ(line["status"], "ok");
}

TEST(WebDataset, TarsOfConsecutiveSamplesAsTarfileReadsThem) {
  TempDir dir;
  const std::string prompts = prompts_file(dir, 7);
  ASSERT_EQ(test::run(generate_cmd(dir / "flat", prompts)).status, 0);
  auto r = test::run(generate_cmd(dir / "wds", prompts + " --output-format webdataset --images-per-tar 3"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "00002.tar written: images 6..6")) << r.output;
  auto checked = check_tars(dir / "wds", 7, 3, dir / "flat");
  EXPECT_EQ(checked.status, 0) << checked.output;

  // A rerun reads no image and writes no tar again.
  const auto before = fs::last_write_time(dir / "wds/00001.tar");
  const std::string bytes = test::read_text(dir / "wds/00001.tar");
  auto again = test::run(generate_cmd(dir / "wds", prompts + " --output-format webdataset --images-per-tar 3"));
  EXPECT_TRUE(has(again.output, "0 done, 7 skipped, 0 failed")) << again.output;
  EXPECT_EQ(fs::last_write_time(dir / "wds/00001.tar"), before);
  EXPECT_TRUE(test::read_text(dir / "wds/00001.tar") == bytes);

  // verify reads each member at its listed place; inspect and the report name the tars.
  auto verified = test::run(fmt::format("{} verify --out {}", test::exe(), dir / "wds"));
  EXPECT_EQ(verified.status, 0) << verified.output;
  EXPECT_TRUE(has(verified.output, "7 of 7 image(s) listed as made match their sha256")) << verified.output;
  auto inspected = test::run(fmt::format("{} inspect {}", test::exe(), dir / "wds"));
  EXPECT_TRUE(has(inspected.output, "layout: webdataset: 7 image(s) in 3 tar(s)")) << inspected.output;
  EXPECT_TRUE(has(test::read_text(dir / "wds/report.html"), "\"00001.tar:000000004.png\"")) << "the report's rows";

  // One byte of image 4 changed inside its tar (same size): the tar's stat differs, so the rerun
  // reads the listed members, finds image 4 changed, makes it again and writes its tar again.
  const auto manifest = read_manifest(dir / "wds");
  const int64_t offset = manifest.at(4)["member_offset"].get<int64_t>() + 40;  // inside the PNG's data
  std::string edited = bytes;
  edited[static_cast<size_t>(offset)] ^= 0x01;
  test::write_text(dir / "wds/00001.tar", edited);
  auto caught = test::run(fmt::format("{} verify --out {}", test::exe(), dir / "wds"));
  EXPECT_NE(caught.status, 0);
  EXPECT_TRUE(has(caught.output, "00001.tar:000000004.png: image 4: its bytes")) << caught.output;
  auto remade = test::run(generate_cmd(dir / "wds", prompts + " --output-format webdataset --images-per-tar 3"));
  EXPECT_EQ(remade.status, 0) << remade.output;
  EXPECT_TRUE(has(remade.output, "1 done, 6 skipped, 0 failed")) << remade.output;
  // Images 3 and 5 are copied from the tar as they were: their members keep their offsets.
  const auto after = read_manifest(dir / "wds");
  for (const int i : {3, 5}) {
    EXPECT_EQ(after.at(i)["member_offset"], manifest.at(i)["member_offset"]) << i;
    EXPECT_EQ(after.at(i)["json_sha256"], manifest.at(i)["json_sha256"]) << i;
    EXPECT_EQ(after.at(i)["run_id"], manifest.at(i)["run_id"]) << i;
  }
  EXPECT_NE(after.at(4)["run_id"], manifest.at(4)["run_id"]) << "image 4 was made again";
  checked = check_tars(dir / "wds", 7, 3, dir / "flat");
  EXPECT_EQ(checked.status, 0) << checked.output;

  // Another tar size, or PNGs, for this folder: other files for every image, refused.
  auto other = test::run(generate_cmd(dir / "wds", prompts + " --output-format webdataset --images-per-tar 2"));
  EXPECT_EQ(other.status, 2) << other.output;
  EXPECT_TRUE(has(other.output, "00000.tar:000000000.png (images_per_tar 3, now 2)")) << other.output;
  auto png = test::run(generate_cmd(dir / "wds", prompts));
  EXPECT_EQ(png.status, 2) << png.output;
}

TEST(WebDataset, OptionsThatMeanNothingTogetherAreRefusedFirst) {
  TempDir dir;
  for (const auto& [extra, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"--output-format tar", "--output-format 'tar' (expected png or webdataset)"},
           {"--output-format webdataset --layout sharded", "--layout sharded with --output-format webdataset"},
           {"--output-format webdataset --images-per-tar 0", "--images-per-tar 0 is out of range"},
           {"--images-per-tar 10", "--images-per-tar 10 needs --output-format webdataset"},
           {"--output-format webdataset --output-type latent", "--output-type latent with --output-format webdataset"}}) {
    auto r = test::run(generate_cmd(dir / "out", "--prompt x " + extra));
    EXPECT_EQ(r.status, 2) << extra << ": " << r.output;
    EXPECT_TRUE(has(r.output, message)) << extra << ": " << r.output;
    EXPECT_FALSE(fs::exists(dir / "out")) << extra;
  }
}

// A tar that cannot be written (a folder planted at its name) stops the run with exit 1; its
// images stay staged and listed, and the next run, with nothing to make, writes the tar without
// reading a weight.
TEST(WebDataset, ATarNotWrittenIsWrittenByTheNextRunWithoutTheModel) {
  TempDir dir;
  const std::string prompts = prompts_file(dir, 3) + " --output-format webdataset --images-per-tar 3";
  fs::create_directories(dir / "out/00000.tar");
  auto r = test::run(generate_cmd(dir / "out", prompts));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r.output, "00000.tar cannot be written")) << r.output;
  EXPECT_TRUE(has(r.output, "1 tar(s) could not be written; their images are staged and listed")) << r.output;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(fs::is_regular_file(dir / fmt::format("out/00000/{:09d}.png", i))) << i;
    EXPECT_TRUE(fs::is_regular_file(dir / fmt::format("out/00000/{:09d}.json", i))) << i;
  }
  auto inspected = test::run(fmt::format("{} inspect {}", test::exe(), dir / "out"));
  EXPECT_TRUE(has(inspected.output, "3 staged in subfolders (their tars not written yet)")) << inspected.output;

  fs::remove(dir / "out/00000.tar");
  auto again = test::run(generate_cmd(dir / "out", prompts));
  EXPECT_EQ(again.status, 0) << again.output;
  EXPECT_TRUE(has(again.output, "00000.tar written: images 0..2")) << again.output;
  EXPECT_TRUE(has(again.output, "weights not read")) << again.output;
  auto checked = check_tars(dir / "out", 3, 3);
  EXPECT_EQ(checked.status, 0) << checked.output;
}

// kill -9 mid-run: the tars already written are whole, the staged images of the next one are
// kept, and the resumed folder holds the same samples as an uninterrupted run.
TEST(WebDataset, AKilledRunResumesPerTar) {
  TempDir dir;
  // Image 2 (the first of the second tar) is slow: the kill lands once the first tar is written.
  const std::string prompts = prompts_file(dir, 5, 2) + " --output-format webdataset --images-per-tar 2";
  ASSERT_EQ(test::run(generate_cmd(dir / "ref", prompts)).status, 0);
  test::Child run(generate_cmd(dir / "out", prompts), dir / "log.txt");
  const bool first = run.wait_until([&] { return fs::exists(dir / "out/00000.tar"); });
  run.signal(SIGKILL);
  const int status = run.wait();
  ASSERT_TRUE(first) << test::read_text(dir / "log.txt");
  ASSERT_TRUE(WIFSIGNALED(status)) << test::read_text(dir / "log.txt");
  EXPECT_FALSE(fs::exists(dir / "out/00002.tar")) << "the run finished before the kill; the test proves nothing";
  auto resumed = test::run(generate_cmd(dir / "out", prompts));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_TRUE(has(resumed.output, "3 done, 2 skipped, 0 failed")) << resumed.output;
  auto checked = check_tars(dir / "out", 5, 2);
  EXPECT_EQ(checked.status, 0) << checked.output;
  // The PNG members are the uninterrupted run's (the .json members hold each run's timings).
  const auto out = read_manifest(dir / "out"), ref = read_manifest(dir / "ref");
  ASSERT_EQ(out.size(), ref.size());
  for (const auto& [i, line] : ref) EXPECT_EQ(out.at(i)["sha256"], line["sha256"]) << i;
}

// read_tar_member returns a member only where TarWriter put it, with the header it wrote.
TEST(WebDataset, AMemberIsReadOnlyFromItsOwnPlace) {
  TempDir dir;
  const std::string a = "first member's bytes", b(700, 'b');
  int64_t at_a = 0, at_b = 0;
  {
    TarWriter tar(dir / "t.tar");
    at_a = tar.add("a.png", a);
    at_b = tar.add("b.json", b);
    tar.commit();
  }
  EXPECT_EQ(at_a, 512);
  EXPECT_EQ(at_b, 512 + 512 + 512);  // a's header, a's data padded to 512, b's header
  EXPECT_EQ(read_tar_member(dir / "t.tar", at_a, "a.png", std::ssize(a)), a);
  EXPECT_EQ(read_tar_member(dir / "t.tar", at_b, "b.json", std::ssize(b)), b);
  EXPECT_EQ(read_tar_member(dir / "t.tar", at_b, "a.png", std::ssize(b)), std::nullopt) << "another member's name";
  EXPECT_EQ(read_tar_member(dir / "t.tar", at_a, "a.png", std::ssize(a) + 1), std::nullopt) << "another size";
  EXPECT_EQ(read_tar_member(dir / "t.tar", at_a + 512, "a.png", std::ssize(a)), std::nullopt) << "another place";
  EXPECT_EQ(read_tar_member(dir / "t.tar", at_b, "b.json", int64_t{1} << 40), std::nullopt) << "past the file";
  // Python's tarfile reads the same members at the same offsets.
  test::write_text(dir / "read.py", "import sys, tarfile\n"
                                    "for m in tarfile.open(sys.argv[1]): print(m.name, m.offset_data, m.size, m.mode, m.mtime)\n");
  auto r = test::run(fmt::format("python3 {} {}", dir / "read.py", dir / "t.tar"));
  EXPECT_EQ(r.output, fmt::format("a.png {} {} 420 0\nb.json {} {} 420 0\n", at_a, a.size(), at_b, b.size()));
}
