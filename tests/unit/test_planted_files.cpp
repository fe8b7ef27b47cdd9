// What others may plant where a command reads or writes (a shared output or log folder, a
// diffusers folder handed over by another user, a path given as root): nothing is followed
// through a symbolic link, nothing but a regular file is opened or replaced, nothing blocks on a
// FIFO, and nothing is read from outside the folder it belongs to.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "io/weight_store.h"
#include "test_util.h"
#include "tiny_model.h"

using namespace ditbatch;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string small_run(const std::string& out, const std::string& extra = "") {
  return fmt::format("{} generate --weights {} --prompt 'a fox' --width 32 --height 32 --steps 2 --out {} {}",
                     test::exe(), test::tiny_model(), out, extra);
}

// The mode bits of a path (not followed).
unsigned mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode;
}

}  // namespace

TEST(PlantedFiles, ARunsLinkInTheOutputFolderIsRefusedBeforeAnyWork) {
  TempDir dir;
  fs::create_directories(dir / "out");
  fs::create_directories(dir / "elsewhere");
  fs::create_directory_symlink(dir / "elsewhere", dir / "out/.runs");
  const auto r = test::run(small_run(dir / "out"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, (dir / "out/.runs") + " is not a folder: the run keeps its run records there (it is a "
                                                  "symbolic link); remove it")) << r.output;
  EXPECT_TRUE(fs::is_empty(dir / "elsewhere"));
  EXPECT_FALSE(fs::exists(dir / "out/000000-a-fox.png"));
}

TEST(PlantedFiles, ALogFileLinkIsNotAppendedThrough) {
  TempDir dir;
  test::write_text(dir / "victim.txt", "precious\n");
  fs::create_directories(dir / "logs");
  fs::create_symlink(dir / "victim.txt", dir / "logs/rank-00000.log");
  const auto r = test::run(small_run(dir / "out", "--log-dir " + (dir / "logs")));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "log file " + (dir / "logs/rank-00000.log") +
                                ": is a symbolic link, which ditbatch does not follow in a log folder; remove it"))
      << r.output;
  EXPECT_EQ(test::read_text(dir / "victim.txt"), "precious\n");
  // A FIFO there is refused, not waited on.
  fs::remove(dir / "logs/rank-00000.log");
  ASSERT_EQ(::mkfifo((dir / "logs/rank-00000.log").c_str(), 0644), 0);
  const auto fifo = test::run("timeout 300 " + small_run(dir / "out", "--log-dir " + (dir / "logs")));
  EXPECT_EQ(fifo.status, 2) << fifo.output;
  EXPECT_TRUE(has(fifo.output, "rank-00000.log: is a FIFO (named pipe), not a file")) << fifo.output;
  // A real log file is appended to, as before.
  fs::remove(dir / "logs/rank-00000.log");
  test::write_text(dir / "logs/rank-00000.log", "earlier run\n");
  ASSERT_EQ(test::run(small_run(dir / "out", "--log-dir " + (dir / "logs"))).status, 0);
  const std::string log = test::read_text(dir / "logs/rank-00000.log");
  EXPECT_TRUE(log.starts_with("earlier run\n")) << log;
  EXPECT_TRUE(has(log, "1 done")) << log;
}

TEST(PlantedFiles, SelftestWritesItsJsonOnlyToARegularFileAndChecksPathsFirst) {
  TempDir dir;
  const std::string device = dir / "null";
  if (::mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) GTEST_SKIP() << "cannot make a device node here";
  const auto selftest = [&](const std::string& args) {
    return test::run(fmt::format("{} selftest --quick --backend cpu --goldens none {}", test::exe(), args));
  };
  auto r = selftest("--json " + device);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "--json " + device + ": is a character device, not a file")) << r.output;
  EXPECT_FALSE(has(r.output, "gemm")) << "refused only after the check ran: " << r.output;
  EXPECT_TRUE(S_ISCHR(mode_of(device)));
  fs::create_directories(dir / "folder");
  r = selftest("--json " + (dir / "folder"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "--json " + (dir / "folder") + ": is a folder, not a file")) << r.output;
  r = selftest("--json " + (dir / "no-such-folder/report.json"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "the folder " + (dir / "no-such-folder") + " does not exist")) << r.output;
  test::write_text(dir / "a-file", "x");
  r = selftest("--temp-dir " + (dir / "a-file"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "--temp-dir " + (dir / "a-file") + ": is not a folder")) << r.output;
  r = test::run(fmt::format("{} selftest --quick --backend cpu --goldens {}", test::exe(), dir / "folder"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "--goldens " + (dir / "folder") + ": expected a folder holding pipeline.h5")) << r.output;
}

TEST(PlantedFiles, AFifoAmongTheRunRecordsBlocksNeitherReportNorGenerate) {
  TempDir dir;
  const std::string out = dir / "out";
  ASSERT_EQ(test::run(small_run(out)).status, 0);
  ASSERT_EQ(::mkfifo((out + "/.runs/planted-rank00000.json").c_str(), 0644), 0);
  fs::create_symlink("/etc/hostname", out + "/.runs/link-rank00000.json");
  // `timeout` only ends a run that would otherwise hang forever (the bug); a fixed run is quick.
  const auto report = test::run(fmt::format("timeout 300 {} report {}", test::exe(), out));
  EXPECT_EQ(report.status, 0) << report.output;
  const auto again = test::run("timeout 300 " + small_run(out, "--prompt 'a second fox'"));
  EXPECT_EQ(again.status, 0) << again.output;
  EXPECT_TRUE(fs::exists(out + "/report.html"));
}

TEST(PlantedFiles, ConvertReadsOnlyTheFolderAndTheTokenizerFilesItKnows) {
  TempDir dir;
  const std::string pipe = dir / "pipe";
  fs::copy(test::golden("tiny-pipeline"), pipe, fs::copy_options::recursive);
  // A root-only file outside, linked as a tokenizer file ditbatch does not read, and a stray file.
  test::write_text(dir / "secret.json", "{\"secret\": \"root only\"}");
  ::chmod((dir / "secret.json").c_str(), 0600);
  fs::create_symlink(dir / "secret.json", pipe + "/tokenizer/special_tokens_map.json");
  test::write_text(pipe + "/tokenizer/notes.bin", std::string(1 << 20, 'x'));
  auto r = test::run(fmt::format("{} convert --from {} --to {}", test::exe(), pipe, dir / "a.h5"));
  ASSERT_EQ(r.status, 0) << r.output;
  {
    const WeightStore store = WeightStore::open(dir / "a.h5");
    std::vector<std::string> stored = store.component("tokenizer").tensor_names();
    std::sort(stored.begin(), stored.end());
    EXPECT_EQ(stored, (std::vector<std::string>{"added_tokens.json", "merges.txt", "tokenizer_config.json", "vocab.json"}));
  }
  test::write_text(dir / "fresh", "");  // what this process's umask makes of a new file
  EXPECT_EQ(mode_of(dir / "a.h5") & 0777, mode_of(dir / "fresh") & 0777);

  // A file it does read, linked outside the folder: refused, naming the link and where it leads.
  fs::copy_file(pipe + "/tokenizer/vocab.json", dir / "vocab-outside.json");
  fs::remove(pipe + "/tokenizer/vocab.json");
  fs::create_symlink(dir / "vocab-outside.json", pipe + "/tokenizer/vocab.json");
  r = test::run(fmt::format("{} convert --from {} --to {}", test::exe(), pipe, dir / "b.h5"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, pipe + "/tokenizer/vocab.json: leads to " + (dir / "vocab-outside.json") +
                                ", outside the pipeline folder")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "b.h5"));
  fs::remove(pipe + "/tokenizer/vocab.json");
  fs::copy_file(dir / "vocab-outside.json", pipe + "/tokenizer/vocab.json");

  // A link loop in a component folder is said as one (once: "missing").
  fs::rename(pipe + "/vae/config.json", dir / "vae-config.json");
  fs::create_symlink("config.json", pipe + "/vae/config.json");
  r = test::run(fmt::format("{} convert --from {} --to {}", test::exe(), pipe, dir / "c.h5"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, pipe + "/vae/config.json: cannot be resolved (")) << r.output;
  EXPECT_TRUE(has(r.output, "a symbolic link loop")) << r.output;
  fs::remove(pipe + "/vae/config.json");
  fs::rename(dir / "vae-config.json", pipe + "/vae/config.json");

  // Inputs only their owner may read make a weight file only its owner may read.
  for (const auto& e : fs::recursive_directory_iterator(pipe))
    if (e.is_regular_file()) ::chmod(e.path().c_str(), 0600);
  r = test::run(fmt::format("{} convert --from {} --to {}", test::exe(), pipe, dir / "d.h5"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(mode_of(dir / "d.h5") & 0077, 0u);
}

TEST(PlantedFiles, AHuggingFaceCacheSnapshotOfLinksIntoBlobsConverts) {
  // The layout huggingface_hub makes: snapshots/REV/<path> -> ../../blobs/<hash> (relative links).
  TempDir dir;
  const fs::path repo = fs::path(dir.path()) / "models--Qwen--tiny";
  const fs::path snapshot = repo / "snapshots/0123abcd";
  int blob = 0;
  for (const auto& e : fs::recursive_directory_iterator(test::golden("tiny-pipeline"))) {
    if (!e.is_regular_file()) continue;
    const fs::path relative = e.path().lexically_relative(test::golden("tiny-pipeline"));
    const fs::path blob_path = repo / "blobs" / fmt::format("blob{:04d}", blob++);
    fs::create_directories(blob_path.parent_path());
    fs::copy_file(e.path(), blob_path);
    fs::create_directories((snapshot / relative).parent_path());
    fs::create_symlink(blob_path.lexically_relative((snapshot / relative).parent_path()), snapshot / relative);
  }
  const auto r = test::run(fmt::format("{} convert --from {} --to {}", test::exe(), snapshot.string(), dir / "hf.h5"));
  EXPECT_EQ(r.status, 0) << r.output;
}

// `verify` is the proof that a folder's images are what its manifest lists: a manifest that is a
// folder, a FIFO or a link (to /dev/zero) is bad input, and one of random bytes proves nothing
// (each once gave "0 of 0 image(s) listed as made match", exit 0).
TEST(PlantedFiles, VerifyNeedsAManifestThatIsOne) {
  TempDir dir;
  const auto verify = [&](const std::string& folder) {
    return test::run(fmt::format("timeout 300 {} verify {}", test::exe(), folder));
  };
  fs::create_directories(dir / "folder/manifest.jsonl");
  auto r = verify(dir / "folder");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, (dir / "folder/manifest.jsonl") + ": is a folder, not the manifest file")) << r.output;
  fs::create_directories(dir / "fifo");
  ASSERT_EQ(::mkfifo((dir / "fifo/manifest.jsonl").c_str(), 0644), 0);
  r = verify(dir / "fifo");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "is a FIFO (named pipe), not the manifest file")) << r.output;
  fs::create_directories(dir / "zero");
  fs::create_symlink("/dev/zero", dir / "zero/manifest.jsonl");
  r = verify(dir / "zero");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "is a symbolic link, not the manifest file")) << r.output;
  fs::create_directories(dir / "random");
  std::string noise(200000, '\0');
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 2654435761u) >> 11);
  test::write_text(dir / "random/manifest.jsonl", noise);
  r = verify(dir / "random");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r.output, "the manifest holds no manifest line")) << r.output;
  // Garbage appended to a real manifest is said, and the real lines are still verified.
  ASSERT_EQ(test::run(small_run(dir / "real")).status, 0);
  { std::ofstream(dir / "real/manifest.jsonl", std::ios::app) << "not json at all\n[1, 2]\n"; }
  r = verify(dir / "real");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "2 line(s) of its manifest files are not manifest lines (not a JSON object with an integer "
                            "\"index\"): manifest.jsonl line 2, manifest.jsonl line 3;"))
      << r.output;
  EXPECT_TRUE(has(r.output, "1 of 1 image(s) listed as made match their sha256")) << r.output;
}

// Lines appended to a manifest that are not manifest lines were skipped without a word by
// generate, inspect and report; an image listed past the prompt list, too. Each reader says
// which lines (the file's own line numbers, counted here from the bytes written).
TEST(PlantedFiles, LinesThatAreNotManifestLinesAreSaidByEveryReader) {
  TempDir dir;
  const std::string out = dir / "out";
  const std::string two = "--prompt 'a hen'";  // and small_run's 'a fox'
  ASSERT_EQ(test::run(small_run(out, two)).status, 0);
  std::string lines = test::read_text(out + "/manifest.jsonl");
  ASSERT_EQ(std::count(lines.begin(), lines.end(), '\n'), 2) << lines;
  auto past = nlohmann::json::parse(lines.substr(0, lines.find('\n')));
  past["index"] = 7;
  { std::ofstream(out + "/manifest.jsonl", std::ios::app) << "\nnot json at all\n{\"index\": \"4\"}\n" << past.dump() << "\n"; }
  // line 3 is blank (not counted), 4 and 5 are not lines, 6 is image 7 of a longer list
  const std::string said = "2 line(s) of its manifest files are not manifest lines (not a JSON object with an integer "
                           "\"index\"): manifest.jsonl line 4, manifest.jsonl line 5;";
  const auto rerun = test::run(small_run(out, two));
  EXPECT_EQ(rerun.status, 0) << rerun.output;
  EXPECT_TRUE(has(rerun.output, said)) << rerun.output;
  EXPECT_TRUE(has(rerun.output, "1 image(s) listed in its manifest have an index this prompt list of 2 has not "
                                "(index 7)"))
      << rerun.output;
  EXPECT_TRUE(has(rerun.output, "0 done, 2 skipped")) << rerun.output;
  const auto inspect = test::run(fmt::format("{} inspect {}", test::exe(), out));
  EXPECT_EQ(inspect.status, 0) << inspect.output;
  EXPECT_TRUE(has(inspect.output, "warning: " + out + ": " + said)) << inspect.output;
  const auto report = test::run(fmt::format("{} report {}", test::exe(), out));
  EXPECT_EQ(report.status, 0) << report.output;
  EXPECT_TRUE(has(report.output, "warning: " + out + ": " + said)) << report.output;
  EXPECT_TRUE(has(test::read_text(out + "/report.html"), "manifest.jsonl line 4, manifest.jsonl line 5")) ;
  // A clean folder says nothing of the kind.
  ASSERT_EQ(test::run(small_run(dir / "clean")).status, 0);
  const auto clean = test::run(fmt::format("{} inspect {}", test::exe(), dir / "clean"));
  EXPECT_FALSE(has(clean.output, "not manifest lines")) << clean.output;
}

// A folder planted where one image's PNG goes once stopped the whole run ("cannot be
// written", as for a full disk): only that image fails, and the others are made.
TEST(PlantedFiles, AFolderAtOneImagesNameFailsOnlyThatImage) {
  TempDir dir;
  const std::string out = dir / "out";
  fs::create_directories(out + "/000001-a-hen.png");
  const auto r = test::run(small_run(out, "--prompt 'a hen' --prompt 'an owl'"));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r.output, "image 1 (--prompt #2) failed: cannot write the output: " + out +
                                "/000001-a-hen.png: is a folder, not a file"))
      << r.output;
  EXPECT_FALSE(has(r.output, "stopping")) << r.output;
  EXPECT_TRUE(has(r.output, "2 done, 0 skipped, 1 failed")) << r.output;
  EXPECT_TRUE(fs::is_regular_file(out + "/000000-a-fox.png"));
  EXPECT_TRUE(fs::is_regular_file(out + "/000002-an-owl.png"));
  EXPECT_TRUE(fs::is_directory(out + "/000001-a-hen.png"));
}

// An option's value that does not parse once got Boost's "the argument ('X') for option '--o' is
// invalid"; an empty --out, "Invalid argument". Each now says what the option takes.
TEST(PlantedFiles, OptionValuesThatDoNotParseSayWhatIsExpected) {
  TempDir dir;
  const auto error_of = [&](const std::string& option) {
    const auto r = test::run(fmt::format("{} generate --weights {} --prompt x --out {} {}", test::exe(),
                                         test::tiny_model(), dir / "out", option));
    EXPECT_EQ(r.status, 2) << r.output;
    return r.output;
  };
  EXPECT_TRUE(has(error_of("--images-per-tar 18446744073709551615"),
                  "--images-per-tar '18446744073709551615': expected a whole number from -9223372036854775808 to "
                  "9223372036854775807"));
  EXPECT_TRUE(has(error_of("--threads 99999999999"), "--threads '99999999999': expected a whole number from"));
  EXPECT_TRUE(has(error_of("--cfg 0x10"), "--cfg '0x10': expected a decimal number such as 4 or 2.5"));
  const auto empty = test::run(fmt::format("{} generate --weights {} --prompt x --out ''", test::exe(), test::tiny_model()));
  EXPECT_EQ(empty.status, 2) << empty.output;
  EXPECT_TRUE(has(empty.output, "--out '': name the output folder")) << empty.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
}
