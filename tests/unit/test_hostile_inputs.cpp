// Inputs a new user (or another user of a shared output folder) may hand ditbatch, tried with
// the real binary on real files, FIFOs, symbolic links and device nodes: each is refused with
// what is wrong, before any work, leaving nothing half-written and nothing outside --out.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include <omp.h>

#include "core/fs.h"
#include "core/sha256.h"
#include "io/h5.h"
#include "io/manifest.h"
#include "io/png_io.h"
#include "io/prompt_file.h"
#include "io/weight_store.h"
#include "pipeline/job.h"
#include "test_util.h"
#include "tiny_model.h"

using namespace ditbatch;
using test::Child;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

// A small, quick image: what these tests make when a run must go through.
std::string small_run(const std::string& weights, const std::string& out, const std::string& extra) {
  return fmt::format("{} generate --weights {} --out {} --width 32 --height 32 --steps 2 {}", test::exe(), weights,
                     out, extra);
}

// Every name in a folder (hidden ones too), sorted.
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A character device like /dev/null, made where the test may (root, not in a nodev mount).
bool make_null_device(const std::string& path) { return ::mknod(path.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0; }

std::vector<PromptEntry> entries_of(const std::string& text, const std::string& name) {
  return parse_prompt_text(text, name);
}

}  // namespace

// ---- security: what is written, and where -----------------------------------------------------

// `--to /dev/null` as root once replaced /dev/null by a 55 MB file; a FIFO or a link to one is
// no better. Only a regular file (or nothing) is replaced, and never an input of the conversion.
TEST(HostileOutputs, ConvertAndMakeTinyWriteOnlyRegularFiles) {
  TempDir dir;
  auto make_tiny = [&](const std::string& out) { return test::run(test::exe() + " make-tiny --out " + out); };
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  auto fifo = make_tiny(dir / "fifo");
  EXPECT_EQ(fifo.status, 2) << fifo.output;
  EXPECT_TRUE(has(fifo.output, (dir / "fifo") + ": is a FIFO (named pipe), not a file; ditbatch writes only regular "
                                                  "files")) << fifo.output;
  fs::create_symlink(dir / "fifo", dir / "link-to-fifo");
  auto link = make_tiny(dir / "link-to-fifo");
  EXPECT_EQ(link.status, 2) << link.output;
  EXPECT_TRUE(has(link.output, "link-to-fifo: is a symbolic link to a FIFO (named pipe), not a file")) << link.output;
  fs::create_directories(dir / "folder");
  fs::create_symlink(dir / "folder", dir / "link-to-folder");
  auto folder = make_tiny(dir / "link-to-folder");
  EXPECT_EQ(folder.status, 2) << folder.output;
  EXPECT_TRUE(has(folder.output, "link-to-folder: is a symbolic link to a folder, not a file")) << folder.output;
  EXPECT_TRUE(fs::is_fifo(dir / "fifo"));
  EXPECT_TRUE(fs::is_empty(dir / "folder"));

  if (!make_null_device(dir / "null")) {
    GTEST_SKIP() << "cannot make a device node here (needs root and a mount without nodev): " << std::strerror(errno);
  }
  for (const std::string& command : {test::exe() + " make-tiny --out " + (dir / "null"),
                                     fmt::format("{} convert --from {} --to {}", test::exe(),
                                                 test::golden("tiny-pipeline"), dir / "null")}) {
    auto r = test::run(command);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(has(r.output, (dir / "null") + ": is a character device, not a file")) << r.output;
    struct stat st {};
    ASSERT_EQ(::lstat((dir / "null").c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device node was replaced";
  }
  // Nothing was left beside them: no temporary of any attempt.
  EXPECT_EQ(names_in(dir.path()), (std::vector<std::string>{"fifo", "folder", "link-to-fifo", "link-to-folder", "null"}));
}

// convert --to one of its own source files destroyed the source (exit 0): by its name, through
// a symbolic link, or a hard link elsewhere, the output is refused before any work.
TEST(HostileOutputs, ConvertNeverWritesOverItsOwnInputs) {
  TempDir dir;
  fs::copy(test::golden("tiny-pipeline"), dir / "pipe", fs::copy_options::recursive);
  const std::string shard = dir / "pipe/vae/diffusion_pytorch_model.safetensors";
  const std::string before = sha256_file(shard);
  fs::create_symlink(shard, dir / "symlink.h5");
  fs::create_hard_link(dir / "pipe/tokenizer/merges.txt", dir / "hardlink.h5");
  for (const auto& [to, named] : std::vector<std::pair<std::string, std::string>>{
           {shard, shard}, {dir / "symlink.h5", shard}, {dir / "hardlink.h5", dir / "pipe/tokenizer/merges.txt"}}) {
    auto r = test::run(fmt::format("{} convert --from {} --to {}", test::exe(), dir / "pipe", to));
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(has(r.output, to + ": is " + named)) << r.output;
    EXPECT_TRUE(has(r.output, "an input of this conversion: writing it would destroy its source")) << r.output;
    EXPECT_FALSE(has(r.output, "converting ")) << "refused before any work: " << r.output;
  }
  EXPECT_EQ(sha256_file(shard), before);
  EXPECT_TRUE(fs::is_symlink(dir / "symlink.h5"));
  EXPECT_EQ(test::read_text(dir / "hardlink.h5"), test::read_text(test::golden("tiny-pipeline/tokenizer/merges.txt")));
}

// A file in a folder others may write to: a temporary is made exclusively under a name no one
// can predict, and written through its own descriptor. The names an older ditbatch used
// (".<name>.tmp.<pid>") hold planted links here; nothing is written through them.
TEST(HostileOutputs, TemporariesAreNeverWrittenThroughAPlantedLink) {
  TempDir dir, elsewhere;
  test::write_text(elsewhere / "victim", "keep me");
  fs::create_symlink(elsewhere / "victim", dir / fmt::format(".x.png.tmp.{}", ::getpid()));
  write_file_atomic(dir / "x.png", "new bytes");
  EXPECT_EQ(test::read_text(elsewhere / "victim"), "keep me");
  EXPECT_EQ(test::read_text(dir / "x.png"), "new bytes");
  EXPECT_FALSE(fs::is_symlink(dir / "x.png"));

  // A link at the final name is replaced by the file, not followed.
  fs::create_symlink(elsewhere / "victim", dir / "y.png");
  write_file_atomic(dir / "y.png", "y");
  EXPECT_FALSE(fs::is_symlink(dir / "y.png"));
  EXPECT_EQ(test::read_text(elsewhere / "victim"), "keep me");

  // Two names for one file differ, and say who writes them.
  const std::string a = temp_path_for(dir / "z.png"), b = temp_path_for(dir / "z.png");
  EXPECT_NE(a, b);
  EXPECT_TRUE(has(a, fmt::format("/.z.png.tmp.{}.{}.", ::getpid(), process_start_time(::getpid())))) << a;

  // HDF5 temporaries (latents, weight files) are created exclusively too: a link at the name is refused.
  fs::create_symlink(elsewhere / "victim", dir / "planted.h5");
  EXPECT_NE(test::input_error_of([&] { h5::File::create_exclusive(dir / "planted.h5"); }).find("planted.h5"),
            std::string::npos);
  EXPECT_EQ(test::read_text(elsewhere / "victim"), "keep me");
}

// A link planted in --out at a name the run keeps there would make it read, append to or create
// files elsewhere: the run refuses it, before any work, and touches nothing it points to.
TEST(HostileOutputs, LinksPlantedInTheOutputFolderAreRefused) {
  TempDir dir, elsewhere;
  test::write_text(elsewhere / "victim", "keep me");
  fs::create_directories(elsewhere / "folder");
  for (const auto& [name, target] : std::vector<std::pair<std::string, std::string>>{
           {".ditbatch-run.lock", elsewhere / "victim"},
           {".manifest", elsewhere / "folder"},
           {".manifest.lock", elsewhere / "victim"},
           {"manifest.jsonl", elsewhere / "victim"}}) {
    const std::string out = dir / ("out-" + name);
    fs::create_directories(out);
    fs::create_symlink(target, out + "/" + name);
    auto r = test::run(small_run(test::tiny_model(), out, "--prompt x"));
    EXPECT_EQ(r.status, 2) << name << ": " << r.output;
    EXPECT_TRUE(has(r.output, out + "/" + name + " is not ")) << r.output;
    EXPECT_TRUE(has(r.output, "(it is a symbolic link); remove it")) << r.output;
    EXPECT_FALSE(has(r.output, "loaded")) << r.output;
  }
  EXPECT_EQ(test::read_text(elsewhere / "victim"), "keep me");
  EXPECT_TRUE(fs::is_empty(elsewhere / "folder"));
}

// A manifest line whose "file" leads out of --out ("../../dev/zero" hung the run, deaf to
// SIGTERM, reading forever) or names a link: no such file is opened, and none counts as made.
TEST(HostileOutputs, ManifestLinesNamingFilesOutsideTheFolderAreNotRead) {
  TempDir dir, elsewhere;
  const std::string out = dir / "out";
  ASSERT_EQ(test::run(small_run(test::tiny_model(), out, "--prompt a --prompt b")).status, 0);
  auto manifest = read_manifest(out);
  ASSERT_EQ(manifest.size(), 2u);
  const nlohmann::json made = manifest.at(1);  // a complete image, to copy as a link elsewhere
  const std::string png = made["file"];
  fs::copy_file(out + "/" + png, elsewhere / png);
  fs::remove(out + "/" + png);
  fs::create_symlink(elsewhere / png, out + "/" + png);
  nlohmann::json zero = manifest.at(0);
  zero["file"] = "../../../../../../../../dev/zero";
  test::write_text(out + "/manifest.jsonl", zero.dump() + "\n" + made.dump() + "\n");
  // Another prompt list at index 0 reads the line's file (to name it among the changed
  // images); the link at index 1's name must not pass for its complete PNG.
  // A bound for a run that hangs; SIGKILL, since such a run ignored SIGTERM.
  const std::string cmd = "timeout -s KILL 300 " + small_run(test::tiny_model(), out, "--prompt c --prompt b");
  auto r = test::run(cmd);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "2 done, 0 skipped, 0 failed")) << r.output;
  EXPECT_FALSE(fs::is_symlink(out + "/" + png)) << "the PNG was made again over the link";
  EXPECT_EQ(test::read_text(elsewhere / png), test::read_text(out + "/" + png));  // same image, its own file
}

// A weight file edited in place (a tensor scaled by 3) kept the checksum it was written with,
// and resume took its images for those of the model that checksum names. Every read checks
// the tensor's digest; a digest or checksum changed along with it is found when the file opens.
// A tensor's bytes changed in the file, its digest and the checksums left as they were.
static void scale_proj_out_in_place(const std::string& path) {
  h5::File f = h5::File::open_rw(path);
  h5::Group t = f.root().open_group("transformer");
  Tensor w = t.read_tensor("proj_out.weight");
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] *= 3.0f;
  t.overwrite_dataset("proj_out.weight", w.raw());
}

TEST(HostileWeights, ATensorEditedInPlaceIsRefused) {
  TempDir dir;
  fs::copy_file(test::tiny_model(), dir / "edited.h5");
  scale_proj_out_in_place(dir / "edited.h5");
  auto r = test::run(small_run(dir / "edited.h5", dir / "out", "--prompt x"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, (dir / "edited.h5") + ":/transformer/proj_out.weight: its bytes do not match the digest "
                                                   "recorded when the file was written")) << r.output;
  EXPECT_TRUE(has(r.output, "convert it again")) << r.output;
  EXPECT_FALSE(has(r.output, "image 0 done")) << r.output;

  // The digest rewritten to match: the checksum it adds up to is not the one recorded.
  {
    h5::File f = h5::File::open_rw(dir / "edited.h5");
    h5::Group t = f.root().open_group("transformer");
    Tensor w = t.read_tensor("proj_out.weight");
    t.set_dataset_attr("proj_out.weight", digest_attribute(DigestKind::Xxh3Pieces), tensor_digest(w.raw(), w.nbytes()));
  }
  EXPECT_TRUE(has(test::input_error_of([&] { WeightStore::open(dir / "edited.h5"); }),
                  "the checksum recorded for /transformer (")) << "the digest alone was rewritten";
  // A file of the format before digests says what to do.
  fs::copy_file(test::tiny_model(), dir / "old.h5");
  h5::File::open_rw(dir / "old.h5").root().set_attr("format_version", int64_t{1});
  EXPECT_TRUE(has(test::input_error_of([&] { WeightStore::open(dir / "old.h5"); }),
                  "weight format 1, written by an older ditbatch: its tensors carry no digests"));
  // The checksum a file names is a function of what it holds: a file written from the same
  // weights names the same one, from other weights another.
  test::rewrite_weights(test::tiny_model(), dir / "same.h5", {});
  EXPECT_EQ(WeightStore::open(dir / "same.h5").checksum(), WeightStore::open(test::tiny_model()).checksum());
  test::rewrite_weights(test::tiny_model(), dir / "scaled.h5",
                        {.tensor = [](const std::string& c, const std::string& name, Tensor& t) {
                          if (c == "transformer" && name == "proj_out.weight")
                            for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] *= 3.0f;
                        }});
  EXPECT_NE(WeightStore::open(dir / "scaled.h5").checksum(), WeightStore::open(test::tiny_model()).checksum());
}

// A digest is the hash of the concatenated hex hashes of each 4 MiB piece: format 3's with
// XXH3-128 as the python xxhash package computes it (Debian's python3-xxhash, for Debian's
// python3), format 2's with SHA-256 as hashlib does.
// Editing a root attribute in place (the prompt template, the tokens it drops) changed every
// image but not model_checksum, so a resume mixed images of two models: the checksum covers
// every root attribute that can change an image, and an edit is refused at open.
TEST(HostileWeights, ARootAttributeEditedInPlaceIsRefused) {
  TempDir dir;
  for (const auto& [attr, edit] : std::vector<std::pair<std::string, std::function<void(h5::Group&)>>>{
           {"prompt_template", [](h5::Group& root) { root.set_attr("prompt_template", std::string("{}")); }},
           {"prompt_template_encode_start_idx",
            [](h5::Group& root) { root.set_attr("prompt_template_encode_start_idx", int64_t{33}); }},
           {"an added sample_sigmas", [](h5::Group& root) { root.set_attr("sample_sigmas", 0.5); }},
       }) {
    SCOPED_TRACE(attr);
    const std::string path = dir / "edited.h5";
    fs::remove(path);
    fs::copy_file(test::tiny_model(), path);
    {
      h5::File f = h5::File::open_rw(path);
      h5::Group root = f.root();
      edit(root);
    }
    const auto r = test::run(small_run(path, dir / "out", "--prompt x"));
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(has(r.output, path + ": the checksum recorded for its root attributes (")) << r.output;
    EXPECT_TRUE(has(r.output, "was changed after the file was written; convert it again")) << r.output;
    EXPECT_FALSE(fs::exists(dir / "out/000000-x.png"));
  }
  // Attributes that change no image (where it was converted from, by which ditbatch) may differ.
  const std::string moved = dir / "moved.h5";
  fs::copy_file(test::tiny_model(), moved);
  h5::File::open_rw(moved).root().set_attr("source", std::string("/elsewhere"));
  EXPECT_EQ(WeightStore::open(moved).checksum(), WeightStore::open(test::tiny_model()).checksum());
  // A file of format 3 (before the root attributes were covered) still loads, with its checksum.
  const std::string v3 = dir / "v3.h5";
  test::rewrite_weights(test::tiny_model(), v3, {}, /*format_version=*/3);
  EXPECT_EQ(WeightStore::open(v3).root_int("format_version"), 3);
  EXPECT_FALSE(WeightStore::open(v3).root().has_attr("checksum.root"));
  EXPECT_NE(WeightStore::open(v3).checksum(), WeightStore::open(test::tiny_model()).checksum());
  EXPECT_EQ(test::run(small_run(v3, dir / "v3-out", "--prompt x")).status, 0);
}

// A weight file truncated in place during a run (`cp new.h5 old.h5` over a file in use) was a
// Bus error with an Open MPI backtrace (exit 135): the run now ends with one line naming the
// file (exit 1), keeping the images it finished, listed, and no temporary file.
TEST(HostileWeights, AWeightFileTruncatedDuringARunEndsItCleanly) {
  TempDir dir;
  const std::string weights = dir / "w.h5";
  fs::copy_file(test::tiny_model(), weights);
  std::string prompts;
  for (int i = 0; i < 1000; ++i) prompts += fmt::format("prompt number {}\n", i);
  test::write_text(dir / "p.txt", prompts);
  const std::string log = dir / "log.txt";
  Child run(fmt::format("{} generate --weights {} --prompts {} --out {} --width 32 --height 32 --steps 2", test::exe(),
                        weights, dir / "p.txt", dir / "out"),
            log);
  // Once an image is done, 999 more need the weights: cut the file under the run then.
  ASSERT_TRUE(run.wait_until([&] { return has(test::read_text(log), "image 0 done"); })) << test::read_text(log);
  ASSERT_EQ(::truncate(weights.c_str(), 1 << 20), 0);
  const int status = run.wait();
  const std::string output = test::read_text(log);
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status) << ": " << output;
  EXPECT_EQ(WEXITSTATUS(status), 1) << output;
  EXPECT_TRUE(has(output, "ditbatch: error: " + weights + ": the weight file changed under the run")) << output;
  EXPECT_FALSE(has(output, "backtrace")) << output;
  // What was finished is complete and listed (verify hashes every listed image), nothing else.
  const auto verify = test::run(fmt::format("{} verify {}", test::exe(), dir / "out"));
  EXPECT_EQ(verify.status, 0) << verify.output;
  EXPECT_TRUE(has(verify.output, "image(s) listed as made match their sha256")) << verify.output;
  for (const auto& e : fs::directory_iterator(dir / "out"))
    EXPECT_FALSE(has(e.path().filename().string(), ".tmp.")) << e.path();
}

TEST(HostileWeights, TheTensorDigestsAreTheDocumentedOnes) {
  const std::vector<float> small = test::random_floats(1000, 5);
  std::string bytes(reinterpret_cast<const char*>(small.data()), small.size() * 4);
  TempDir dir;
  test::write_text(dir / "small.bin", bytes);
  std::string big((size_t{4} << 20) * 3 + 4097, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  test::write_text(dir / "big.bin", big);
  const std::string reference =
      "import sys\n"
      "try:\n"
      "  import xxhash\n"
      "except ImportError:\n"
      "  sys.exit('python3-xxhash is not installed (tools/install-deps.sh)')\n"
      "import hashlib\n"
      "xxh = lambda b: xxhash.xxh3_128_hexdigest(b)\n"
      "sha = lambda b: hashlib.sha256(b).hexdigest()\n"
      "for h in (xxh, sha):\n"
      "  for p in sys.argv[1:]:\n"
      "    b = open(p, 'rb').read(); n = 4 << 20\n"
      "    pieces = [b[i:i + n] for i in range(0, max(len(b), 1), n)]\n"
      "    print(h(''.join(h(x) for x in pieces).encode()))\n";
  test::write_text(dir / "reference.py", reference);
  auto r = test::run(fmt::format("/usr/bin/python3 {} {} {}", dir / "reference.py", dir / "small.bin", dir / "big.bin"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, tensor_digest(bytes.data(), bytes.size()) + "\n" + tensor_digest(big.data(), big.size()) + "\n" +
                          tensor_digest(bytes.data(), bytes.size(), DigestKind::Sha256Pieces) + "\n" +
                          tensor_digest(big.data(), big.size(), DigestKind::Sha256Pieces) + "\n");

  // The writer hashes a big tensor's pieces while it writes them, on one thread or several:
  // the digest it records is still the reference's, and the file holds the bytes.
  std::vector<std::string> reference_digests;
  for (std::istringstream lines(r.output); std::getline(lines, reference_digests.emplace_back());) {}
  const int threads = omp_get_max_threads();
  for (const int t : {1, std::max(2, threads)}) {
    omp_set_num_threads(t);
    const std::string path = dir / fmt::format("big-{}.h5", t);
    {
      WeightWriter writer(path);
      writer.begin_component("scheduler", "");
      writer.add_tensor("big", {static_cast<int64_t>(big.size())}, DType::U8, big.data());
      writer.end_component();
      writer.finish();
    }
    const h5::File file = h5::File::open_read(path);
    const h5::Group group = file.root().open_group("scheduler");
    EXPECT_EQ(group.dataset_attr_string("big", "xxh3_128_4mib"), reference_digests.at(1)) << t << " threads";
    const Tensor back = group.read_tensor("big");
    EXPECT_TRUE(back.nbytes() == big.size() && std::memcmp(back.raw(), big.data(), big.size()) == 0) << t << " threads";
  }
  omp_set_num_threads(threads);
}

// `from` as a file of weight format 2 (SHA-256 digests, attribute sha256_4mib), as an older
// ditbatch wrote it.
static void write_format_2(const std::string& from, const std::string& to) {
  fs::copy_file(from, to);
  h5::File f = h5::File::open_rw(to);
  h5::Group root = f.root();
  root.set_attr("format_version", int64_t{2});
  std::vector<std::pair<std::string, std::string>> sums;
  for (const std::string& name : root.members()) {
    if (!root.has_group(name)) continue;
    h5::Group g = root.open_group(name);
    std::vector<DatasetDigest> digests;
    for (const std::string& member : g.members()) {
      if (!g.has_dataset(member)) continue;
      const Tensor t = g.read_tensor(member);
      const std::string digest = tensor_digest(t.raw(), t.nbytes(), DigestKind::Sha256Pieces);
      g.set_dataset_attr(member, "sha256_4mib", digest);
      digests.push_back({member, std::string(dtype_name(t.dtype())), shape_str(t.shape()), digest});
    }
    const std::string sum = component_checksum(g.has_attr("config_json") ? g.attr_string("config_json") : "", digests);
    root.set_attr("checksum." + name, sum);
    sums.emplace_back(name, sum);
  }
  root.set_attr("checksum", file_checksum(sums));
}

// A file of format 2 loads as it did (its checksum, and so its finished images, stay valid),
// and its SHA-256 digests are still checked on every read.
TEST(HostileWeights, AFileOfFormat2StillLoadsAndIsChecked) {
  TempDir dir;
  write_format_2(test::tiny_model(), dir / "v2.h5");
  const std::string out = dir / "out";
  auto r = test::run(small_run(dir / "v2.h5", out, "--prompt x"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto again = test::run(small_run(dir / "v2.h5", out, "--prompt x"));
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_TRUE(has(again.output, "0 done, 1 skipped, 0 failed")) << again.output;
  // The same pixels as from the format-3 file: the same weights.
  auto v3 = test::run(small_run(test::tiny_model(), dir / "out3", "--prompt x"));
  ASSERT_EQ(v3.status, 0) << v3.output;
  const std::string png = "000000-x.png";
  EXPECT_EQ(read_png(out + "/" + png).pixels, read_png(dir / "out3" + "/" + png).pixels);

  scale_proj_out_in_place(dir / "v2.h5");
  auto edited = test::run(small_run(dir / "v2.h5", dir / "out4", "--prompt x"));
  EXPECT_EQ(edited.status, 2) << edited.output;
  EXPECT_TRUE(has(edited.output, (dir / "v2.h5") + ":/transformer/proj_out.weight: its bytes do not match the digest"))
      << edited.output;
}

// ---- inputs that hang or exhaust memory --------------------------------------------------------

// A FIFO as --prompts blocked open() forever, deaf to SIGINT/SIGTERM; /dev/zero behind a .txt
// link was read without limit. Only regular files are read, and a prompt file is bounded.
TEST(HostileInputs, PromptFilesMustBeRegularFilesOfBoundedSize) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo.txt").c_str(), 0644), 0);
  fs::create_symlink("/dev/zero", dir / "zero.txt");
  for (const auto& [file, what] : std::vector<std::pair<std::string, std::string>>{
           {dir / "fifo.txt", "is a FIFO (named pipe), not a file"}, {dir / "zero.txt", "is a character device, not a file"}}) {
    auto r = test::run("timeout -s KILL 120 " + small_run(test::tiny_model(), dir / "out", "--prompts " + file));
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(has(r.output, file + ": " + what)) << r.output;
  }
  // A sparse file of 300 MiB: refused by its size before a byte is read.
  {
    const int fd = ::open((dir / "huge.txt").c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, int64_t{300} << 20), 0);
    ::close(fd);
  }
  auto huge = test::run(small_run(test::tiny_model(), dir / "out", "--prompts " + (dir / "huge.txt")));
  EXPECT_EQ(huge.status, 2) << huge.output;
  EXPECT_TRUE(has(huge.output, (dir / "huge.txt") + ": 314572800 bytes, more than the 256 MiB an input file may hold"))
      << huge.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// Tokenizer files and safetensors shards are inputs too: a FIFO among them is refused, not waited on.
TEST(HostileInputs, TokenizerFilesAndShardsMustBeRegularFiles) {
  TempDir dir;
  fs::copy(test::golden("tiny-pipeline"), dir / "pipe", fs::copy_options::recursive);
  fs::remove(dir / "pipe/tokenizer/merges.txt");
  ASSERT_EQ(::mkfifo((dir / "pipe/tokenizer/merges.txt").c_str(), 0644), 0);
  auto tokenize = test::run("echo '\"a cat\"' | timeout -s KILL 120 " + test::exe() + " tokenize --tokenizer " + (dir / "pipe/tokenizer"));
  EXPECT_EQ(tokenize.status, 2) << tokenize.output;
  EXPECT_TRUE(has(tokenize.output, "merges.txt: is a FIFO (named pipe), not a file")) << tokenize.output;
  fs::remove(dir / "pipe/tokenizer/merges.txt");
  fs::copy_file(test::golden("tiny-pipeline/tokenizer/merges.txt"), dir / "pipe/tokenizer/merges.txt");
  const std::string shard = dir / "pipe/vae/diffusion_pytorch_model.safetensors";
  fs::remove(shard);
  ASSERT_EQ(::mkfifo(shard.c_str(), 0644), 0);
  auto convert = test::run(fmt::format("timeout -s KILL 120 {} convert --from {} --to {}", test::exe(), dir / "pipe", dir / "x.h5"));
  EXPECT_EQ(convert.status, 2) << convert.output;
  EXPECT_TRUE(has(convert.output, shard + ": cannot open as a safetensors file: a FIFO (named pipe)")) << convert.output;
  EXPECT_FALSE(fs::exists(dir / "x.h5"));
}

// --width 8192 --height 8192 on the CPU was accepted and spent > 10 minutes in one step: what
// cannot fit in memory is refused with the estimate (here under `ulimit -v`, so that the
// refusal does not depend on the machine), and what will take hours is announced first.
TEST(HostileInputs, ImageSizesTheCpuCannotHoldOrTakeHoursAreSaidBeforeAnyWork) {
  TempDir dir;
  auto r = test::run(fmt::format("ulimit -v 16000000 && {}",
                                 small_run(test::tiny_model(), dir / "out", "--prompt x --width 8192 --height 8192")));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "image 0 (--prompt #1) is 8192x8192: on the CPU backend this run needs about ")) << r.output;
  EXPECT_TRUE(has(r.output, "GiB is available (ulimit -v)") || has(r.output, "GiB is available (MemAvailable"))
      << r.output;
  EXPECT_FALSE(has(r.output, "loaded")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out")) << "refused before --out is made";

  // 1000 steps at 2048x2048 on one thread: hours. Said before the weights load; then stopped.
  Child run(small_run(test::tiny_model(), dir / "long", "--prompt x --width 2048 --height 2048 --steps 1000 --threads 1"),
            dir / "log.txt");
  const bool warned = run.wait_until([&] { return test::log_has(dir / "log.txt", "takes at least"); });
  run.signal(SIGKILL);
  run.wait();
  const std::string log = test::read_text(dir / "log.txt");
  ASSERT_TRUE(warned) << log;
  EXPECT_TRUE(has(log, "image 0 (--prompt #1), 2048x2048 with 1000 steps and CFG, takes at least ")) << log;
  EXPECT_TRUE(has(log, " on the CPU backend (")) << log;
  EXPECT_FALSE(has(log, "text encoder loaded")) << "announced before loading: " << log;
}

// A second signal ended a run only at the end of the step, and one step can take minutes: now
// the run is given a few seconds to reach it, then ends from the handler (exit 75), leaving no
// temporary file and a manifest that the next run reads. With --on-signal abandon the first
// signal does so. One step here (2560x2560 on one thread) takes tens of seconds.
TEST(HostileInputs, ASecondSignalEndsTheRunInsideALongStep) {
  for (const bool abandon : {false, true}) {
    TempDir dir;
    const std::string log = dir / "log.txt";
    Child run(small_run(test::tiny_model(), dir / "out",
                        std::string("--prompt x --width 2560 --height 2560 --threads 1 --log-level debug") +
                            (abandon ? " --on-signal abandon" : "")),
              log);
    // Signalled once the image's steps have begun (its debug line): at "VAE loaded" the signal
    // could land before the image starts, and the run then stops without one (a loaded CI).
    ASSERT_TRUE(run.wait_until([&] {
      return test::log_has(log, "): denoising, ") || test::log_has(log, "error") ||
             test::log_has(log, "on the CPU backend this run needs about");
    })) << test::read_text(log);
    if (test::log_has(log, "on the CPU backend this run needs about"))
      GTEST_SKIP() << "not enough memory here: " << test::read_text(log);
    run.signal(SIGTERM);
    if (!abandon) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // a second request is a second or more later
      run.signal(SIGTERM);
    }
    const int status = run.wait();
    const std::string text = test::read_text(log);
    ASSERT_TRUE(WIFEXITED(status)) << text;
    EXPECT_EQ(WEXITSTATUS(status), 75) << text;
    EXPECT_TRUE(has(text, "stopped at once by a signal: the image in progress is lost")) << text;
    EXPECT_FALSE(has(text, "image 0 done")) << text;
    EXPECT_FALSE(has(text, "steps left), then stopping")) << "ended inside the first step: " << text;
    for (const std::string& name : names_in(dir / "out")) EXPECT_FALSE(has(name, ".tmp.")) << name;
    EXPECT_TRUE(read_manifest(dir / "out").empty());
  }
}

// A config with num_layers 10^9 allocated gigabytes and died with a bare std::bad_alloc (now
// refused by its range where the config is read); one in range that does not match the file
// (1000 layers of 2), or 0 text-encoder layers, ignored or missed the file's layers. Block
// counts are checked against the tensors the file holds, before anything is allocated, naming
// the key, its value and the blocks held.
TEST(HostileInputs, ConfigsThatDoNotDescribeTheTensorsAreRefused) {
  TempDir dir;
  struct Case {
    std::string component, key, value, message;
  };
  const std::vector<Case> cases = {
      {"transformer", "num_layers", "1000000000",
       ":/transformer: config 'num_layers' = 1000000000 is out of range (expected 1..1024)"},
      {"transformer", "num_layers", "1000",
       ":/transformer: config num_layers = 1000, but the file holds 2 (transformer_blocks.0 .. transformer_blocks.1)"},
      {"text_encoder", "num_hidden_layers", "0",
       ":/text_encoder: config num_hidden_layers = 0, but the file holds 2 (model.layers.0 .. model.layers.1)"},
      {"vae", "num_res_blocks", "1000", ":/vae: config num_res_blocks + 1 = 1001, but the file holds 3"},
  };
  for (const Case& c : cases) {
    const std::string file = dir / (c.component + "-" + c.value + ".h5");
    test::rewrite_weights(test::tiny_model(), file, {.config = [&](const std::string& component, std::string& config) {
                            if (component != c.component) return;
                            nlohmann::json j = nlohmann::json::parse(config);
                            (j.contains("text_config") ? j["text_config"] : j)[c.key] = std::stoll(c.value);
                            config = j.dump();
                          }});
    // Under `ulimit -v` a gigabyte allocation for the blocks would fail: none is tried.
    auto r = test::run(fmt::format("ulimit -v 4000000 && {}", small_run(file, dir / "out", "--prompt x")));
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(has(r.output, file + c.message)) << r.output;
    EXPECT_FALSE(has(r.output, "bad_alloc")) << r.output;
  }
  // convert checks a diffusers folder's config the same way, before writing anything.
  fs::copy(test::golden("tiny-pipeline"), dir / "pipe", fs::copy_options::recursive);
  nlohmann::json config = nlohmann::json::parse(test::read_text(dir / "pipe/transformer/config.json"));
  config["num_layers"] = 1000;
  test::write_text(dir / "pipe/transformer/config.json", config.dump());
  auto r = test::run(fmt::format("ulimit -v 4000000 && {} convert --from {} --to {}", test::exe(), dir / "pipe",
                                 dir / "c.h5"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, (dir / "pipe/transformer") + ": config num_layers = 1000, but the file holds ")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "c.h5"));
}

// ---- silent wrong results ---------------------------------------------------------------------

// An empty merges.txt tokenized "hello world" byte by byte (190 tokens instead of 7), exit 0,
// in convert, generate and tokenize; an empty tokenizer.json passed convert.
TEST(HostileInputs, TokenizerFilesThatWouldTokenizeWronglyAreRefused) {
  TempDir dir;
  fs::copy(test::golden("tiny-pipeline"), dir / "pipe", fs::copy_options::recursive);
  const std::string merges = dir / "pipe/tokenizer/merges.txt";
  const std::string full = test::read_text(merges);
  const std::string half = full.substr(0, full.find('\n', full.size() / 2) + 1);  // cut after a line
  // The last 0.9 % of the merges gone (rare words would tokenize differently), and one merge gone
  // from the middle: every symbol past the bytes is made by a merge in Qwen's files.
  const size_t lines = static_cast<size_t>(std::count(full.begin(), full.end(), '\n'));
  size_t at = 0;
  for (size_t kept = 0; kept < lines - lines * 9 / 1000; ++kept) at = full.find('\n', at) + 1;
  const std::string cut_slightly = full.substr(0, at);
  const size_t middle = full.find('\n', full.size() / 2) + 1;
  const std::string one_gone = full.substr(0, middle) + full.substr(full.find('\n', middle) + 1);
  for (const std::string& content :
       {std::string(), std::string("#version: 0.2\n"), half, cut_slightly, one_gone}) {
    test::write_text(merges, content);
    auto tokenize = test::run("echo '\"hello world\"' | " + test::exe() + " tokenize --tokenizer " + (dir / "pipe/tokenizer"));
    EXPECT_EQ(tokenize.status, 2) << tokenize.output;
    EXPECT_TRUE(has(tokenize.output, merges + ": ")) << tokenize.output;
    EXPECT_TRUE(has(tokenize.output, "are neither byte symbols nor made by a merge")) << tokenize.output;
    auto convert = test::run(fmt::format("{} convert --from {} --to {}", test::exe(), dir / "pipe", dir / "x.h5"));
    EXPECT_EQ(convert.status, 2) << convert.output;
    EXPECT_TRUE(has(convert.output, merges + ": ")) << convert.output;
    EXPECT_FALSE(fs::exists(dir / "x.h5"));
  }
  test::write_text(merges, full);
  test::write_text(dir / "pipe/tokenizer/tokenizer.json", "");
  auto empty_json = test::run(fmt::format("{} convert --from {} --to {}", test::exe(), dir / "pipe", dir / "x.h5"));
  EXPECT_EQ(empty_json.status, 2) << empty_json.output;
  EXPECT_TRUE(has(empty_json.output, (dir / "pipe/tokenizer") + "/tokenizer.json: bad JSON")) << empty_json.output;
  EXPECT_FALSE(fs::exists(dir / "x.h5"));
  // A weight file whose tokenizer lost its merges (written so, digests and all): generate refuses it.
  test::rewrite_weights(test::tiny_model(), dir / "nomerges.h5", {.file = [](const std::string& name, std::string& bytes) {
                          if (name == "merges.txt") bytes.clear();
                        }});
  auto generate_run = test::run(small_run(dir / "nomerges.h5", dir / "out", "--prompt 'hello world'"));
  EXPECT_EQ(generate_run.status, 2) << generate_run.output;
  EXPECT_TRUE(has(generate_run.output, (dir / "nomerges.h5") + ":/tokenizer/merges.txt: 0 merges, but ")) << generate_run.output;
}

// A NUL in a prompt cut the PNG's text chunks (the parameters chunk lost steps, seed and model
// hash); a U+202E in a name shows "x<U+202E>gnp.exe" as "xexe.png". Control characters are
// refused in prompts (tab and a jsonl newline are text) and names, with file:line and the code point.
TEST(HostileInputs, ControlCharactersInPromptsAndNamesAreRefused) {
  const GenerationDefaults defaults;
  const Log log(0, 1, "error");
  auto error = [&](const std::string& text, const std::string& file) {
    return test::input_error_of([&] { resolve_jobs(entries_of(text, file), defaults, log); });
  };
  EXPECT_EQ(error(std::string("ok\na\0b\n", 7), "p.txt"),
            "p.txt:2: \"prompt\" holds U+0000 (a control character) at byte 1; a prompt may hold tab and newline, no "
            "other control character");
  EXPECT_TRUE(has(error("{\"prompt\": \"bell \\u0007\"}\n", "p.jsonl"), "p.jsonl:1: \"prompt\" holds U+0007 (a control"));
  EXPECT_TRUE(has(error("{\"prompt\": \"x\", \"negative_prompt\": \"\\u001b[2J\"}\n", "p.jsonl"),
                  "p.jsonl:1: \"negative_prompt\" holds U+001B"));
  EXPECT_TRUE(has(error("{\"prompt\": \"x\\u0085\"}\n", "p.jsonl"), "holds U+0085 (a control character) at byte 1"));
  EXPECT_EQ(error("{\"prompt\": \"x\", \"name\": \"cat\\u202egnp.exe\"}\n", "p.jsonl"),
            "p.jsonl:1: \"name\" holds U+202E (a bidirectional formatting character) at byte 3; a file name may hold "
            "no control or bidirectional formatting character");
  EXPECT_TRUE(has(error("{\"prompt\": \"x\", \"name\": \"a\\u2066b\"}\n", "p.jsonl"), "\"name\" holds U+2066"));
  EXPECT_TRUE(has(error("{\"prompt\": \"x\", \"name\": \"tab\\tname\"}\n", "p.jsonl"), "\"name\" holds U+0009"));
  // Tab, a jsonl newline and right-to-left text are prompts as written.
  EXPECT_EQ(resolve_jobs(entries_of("a\tb\n", "tab.txt"), defaults, log).at(0).prompt, "a\tb");
  EXPECT_EQ(resolve_jobs(entries_of("{\"prompt\": \"one\\ntwo \\u202e\\u05e9\\u05dc\\u05d5\\u05dd\"}\n", "p.jsonl"), defaults, log)
                .at(0)
                .prompt,
            "one\ntwo \u202e\u05e9\u05dc\u05d5\u05dd");
  GenerationDefaults bad_negative;
  bad_negative.negative_prompt = "x\x01";
  EXPECT_TRUE(has(test::input_error_of([&] { resolve_jobs(entries_of("a\n", "p.txt"), bad_negative, log); }),
                  "--negative-prompt: \"negative_prompt\" holds U+0001"));
  // The command line's prompts too.
  TempDir dir;
  auto r = test::run(small_run(test::tiny_model(), dir / "out", "--prompt \"$(printf 'a\\001b')\""));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "--prompt #1: \"prompt\" holds U+0001")) << r.output;
}

// A full disk while writing a latents file left a 0-byte temporary that outlived the next
// successful run, logged "no PNG written" though the PNG was written, and dumped HDF5's
// error stack. Now the image leaves no file, the log says what is true, HDF5 stays quiet.
TEST(HostileInputs, AFullDiskWhileWritingLatentsLeavesNothing) {
  TempDir dir;
  // The PNG's size for this image, made where there is room.
  const std::string prompts = "--prompt 'noise 0' --output-type latent --width 256 --height 256";
  ASSERT_EQ(test::run(small_run(test::tiny_model(), dir / "roomy", prompts)).status, 0);
  const auto png_bytes = static_cast<int64_t>(fs::file_size(dir / "roomy/000000-noise-0.png"));
  const auto latents_bytes = static_cast<int64_t>(fs::file_size(dir / "roomy/000000-noise-0.latents.h5"));
  ASSERT_GT(latents_bytes, 40000);
  // Room for the PNG, the lock and manifest files, and far less than the latents.
  const int64_t pages = (png_bytes + 4095) / 4096 + 4;
  fs::create_directories(dir / "out");
  if (test::run(fmt::format("mount -t tmpfs -o size={}k tmpfs {}", pages * 4 + 16, dir / "out")).status != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root and CAP_SYS_ADMIN)";
  struct Unmount {
    std::string path;
    ~Unmount() { test::run("umount " + path); }
  } unmount{dir / "out"};
  auto r = test::run(small_run(test::tiny_model(), dir / "out", prompts));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r.output, "image 0 (--prompt #1) failed: cannot write the output: ")) << r.output;
  EXPECT_TRUE(has(r.output, "; no PNG written")) << r.output;
  EXPECT_FALSE(has(r.output, "HDF5-DIAG")) << r.output;
  for (const std::string& name : names_in(dir / "out")) {
    EXPECT_FALSE(has(name, ".tmp.")) << name << " left behind";
    EXPECT_FALSE(has(name, ".png")) << name << ": a failed image leaves no PNG";
  }
  ASSERT_EQ(test::run("mount -o remount,size=4m " + (dir / "out")).status, 0);
  auto rerun = test::run(small_run(test::tiny_model(), dir / "out", prompts));
  EXPECT_EQ(rerun.status, 0) << rerun.output;
  EXPECT_EQ(test::read_text(dir / "out/000000-noise-0.latents.h5"), test::read_text(dir / "roomy/000000-noise-0.latents.h5"));
  for (const std::string& name : names_in(dir / "out")) EXPECT_FALSE(has(name, ".tmp.")) << name;
}

// ---- clearer or earlier -----------------------------------------------------------------------

// An empty or comment-only prompt file exited 0 with an empty manifest: a job script with a
// broken path "succeeded". An empty array slice of a non-empty file is still fine.
TEST(HostileInputs, APromptFileWithoutPromptsIsAnError) {
  TempDir dir;
  test::write_text(dir / "empty.txt", "");
  test::write_text(dir / "comments.txt", "# only a comment\n\n   \n#another\n");
  test::write_text(dir / "blank.jsonl", "\n\n");
  for (const std::string& file : {dir / "empty.txt", dir / "comments.txt", dir / "blank.jsonl"}) {
    auto r = test::run(small_run(test::tiny_model(), dir / "out", "--prompts " + file));
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(has(r.output, file + ": no prompts (the file is empty, or holds only blank and # comment lines)"))
        << r.output;
  }
  EXPECT_FALSE(fs::exists(dir / "out"));
  test::write_text(dir / "one.txt", "a lighthouse\n");
  auto slice = test::run(small_run(test::tiny_model(), dir / "out", "--prompts " + (dir / "one.txt") +
                                                                        " --array-index 1 --array-count 2"));
  EXPECT_EQ(slice.status, 0) << slice.output;
  EXPECT_TRUE(has(slice.output, "0 done, 0 skipped, 0 failed")) << slice.output;
}

// A 10 MB prompt warned that "the prompt has 1024 tokens" (the tokenizer's cap): the warning
// says the prompt's own count. " cat" is one token, so 3000 cats are 3000 tokens, plus the 5
// the template adds after the dropped ones.
TEST(HostileInputs, ALongPromptIsWarnedAboutWithItsRealLength) {
  TempDir dir;
  std::string prompt = "cat";
  for (int i = 1; i < 3000; ++i) prompt += " cat";
  test::write_text(dir / "long.txt", prompt + "\n");
  auto r = test::run(small_run(test::tiny_model(), dir / "out", "--prompts " + (dir / "long.txt")));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "the prompt has 3005 tokens; the first 512 are used (--max-sequence-length; the tokenizer "
                            "keeps at most 1024)"))
      << r.output;
}

// jsonl integers too large for an integer were "not an integer"; a key given twice took the last.
TEST(HostileInputs, JsonlNumbersOutOfRangeAndRepeatedKeys) {
  auto error = [](const std::string& line) { return test::input_error_of([&] { entries_of(line + "\n", "p.jsonl"); }); };
  EXPECT_EQ(error("{\"prompt\": \"x\", \"width\": 1e20}"), "p.jsonl:1: \"width\" 1e+20 is out of range (16..8192 pixels)");
  EXPECT_EQ(error("{\"prompt\": \"x\", \"height\": 9223372036854775808}"),
            "p.jsonl:1: \"height\" 9223372036854775808 is out of range (16..8192 pixels)");
  EXPECT_EQ(error("{\"prompt\": \"x\", \"seed\": 18446744073709551616}"),
            "p.jsonl:1: \"seed\" 1.8446744073709552e+19 is out of range (0..18446744073709551615)");

  EXPECT_EQ(error("{\"prompt\": \"x\", \"steps\": -1e30}"), "p.jsonl:1: \"steps\" -1e+30 is out of range (2..1000)");
  EXPECT_EQ(error("{\"prompt\": \"x\", \"steps\": 2.5}"), "p.jsonl:1: \"steps\" must be an integer, found 2.5");
  EXPECT_EQ(error("{\"prompt\": \"a\", \"prompt\": \"b\"}"), "p.jsonl:1: \"prompt\" is given twice; give each field once");
  EXPECT_EQ(error("{\"seed\": 1, \"prompt\": \"a\", \"seed\": 2}"), "p.jsonl:1: \"seed\" is given twice; give each field once");
  // The largest seed is a seed.
  EXPECT_EQ(entries_of("{\"prompt\": \"x\", \"seed\": 18446744073709551615}\n", "p.jsonl").at(0).seed,
            std::optional<uint64_t>(18446744073709551615ull));
}

// --threads far above the cores ran 30x slower without a word: it is warned about.
TEST(HostileInputs, MoreThreadsThanCoresAreWarnedAbout) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int cores = CPU_COUNT(&set);
  TempDir dir;
  auto r = test::run(small_run(test::tiny_model(), dir / "out", fmt::format("--prompt x --threads {}", cores + 1)));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, fmt::format("{} CPU threads per rank (--threads or OMP_NUM_THREADS), but this rank has {} "
                                        "core(s)",
                                        cores + 1, cores)))
      << r.output;
  auto fine = test::run(small_run(test::tiny_model(), dir / "out2", fmt::format("--prompt x --threads {}", cores)));
  EXPECT_FALSE(has(fine.output, "CPU threads per rank")) << fine.output;
}

// --backend tpu (or cuda without a GPU) was refused only after --out and the lock were made
// and the weights opened: it is checked with the other options. The weights named here do not
// exist, so an error about them would mean they were looked at first.
TEST(HostileInputs, TheBackendIsCheckedWithTheOtherOptions) {
  TempDir dir;
  const std::string cmd = fmt::format("{} generate --weights {} --out {} --prompt x", test::exe(), dir / "missing.h5",
                                      dir / "out");
  auto tpu = test::run(cmd + " --backend tpu");
  EXPECT_EQ(tpu.status, 2) << tpu.output;
  EXPECT_TRUE(has(tpu.output, "--backend 'tpu' (expected auto, cpu or cuda)")) << tpu.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
  auto cuda = test::run(cmd + " --backend cuda");
  if (cuda.status != 2 || has(cuda.output, "missing.h5")) {
    EXPECT_TRUE(has(cuda.output, "missing.h5: no such file")) << "a GPU answers here: " << cuda.output;
    GTEST_SKIP() << "a GPU is visible: --backend cuda is accepted here";
  }
  EXPECT_TRUE(has(cuda.output, "--backend cuda: ")) << cuda.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// make-tiny --seed -1 was read as 2^64 - 1; generate already refused it.
TEST(HostileInputs, MakeTinyRefusesANegativeSeed) {
  TempDir dir;
  auto r = test::run(test::exe() + " make-tiny --seed -1 --out " + (dir / "t.h5"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "--seed -1: expected an integer from 0 to 18446744073709551615")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "t.h5"));
}

// After kill -9 of a writer its temporary stayed until it was ten minutes old, though the
// README says the next run removes it. One whose writer is provably gone (this host and pid
// namespace, its pid running no process or one that started at another time) goes at once.
TEST(HostileInputs, TemporariesOfWritersProvablyGoneAreRemovedAtOnce) {
  TempDir dir;
  // A writer killed while it wrote (no destructor ran): _exit in a child that made a temporary.
  const pid_t writer = fork();
  if (writer == 0) {
    TempFile tmp(dir / "000000-x.png");
    tmp.write("partial", 7);
    test::write_text(dir / "name", tmp.path());
    _exit(0);
  }
  int status = 0;
  waitpid(writer, &status, 0);
  const std::string orphan = test::read_text(dir / "name");
  ASSERT_TRUE(fs::exists(orphan));
  fs::remove(dir / "name");
  // This process's own name with another start time: the pid is reused by another process.
  const std::string mine = temp_path_for(dir / "000001-y.png");
  const std::string reused = [&] {
    std::string name = mine;
    const std::string start = fmt::format(".{}.{}.", ::getpid(), process_start_time(::getpid()));
    return name.replace(name.find(start), start.size(), fmt::format(".{}.{}.", ::getpid(), process_start_time(::getpid()) + 1));
  }();
  test::write_text(mine, "live");
  test::write_text(reused, "gone");
  // Another host's, just written (its writer may be alive there): kept until ten minutes pass.
  const std::string other_host = dir / ".000002-z.png.tmp.1234.99.1.0123abcd.another-host.example";
  test::write_text(other_host, "theirs");
  const std::string old_other_host = dir / ".000003-w.png.tmp.1234.99.1.0123abcd.another-host.example";
  test::write_text(old_other_host, "theirs, long gone");
  fs::last_write_time(old_other_host, fs::file_time_type::clock::now() - std::chrono::minutes(11));
  std::vector<std::string> removed = remove_orphaned_temp_files(dir.path());
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> expected = {orphan, reused, old_other_host};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(removed, expected);
  EXPECT_TRUE(fs::exists(mine));
  EXPECT_TRUE(fs::exists(other_host));

  // generate sweeps its folder the same way at start.
  fs::remove(mine);
  fs::remove(other_host);
  const pid_t killed = fork();
  if (killed == 0) {
    TempFile tmp(dir / "000000-x.png");
    tmp.write("partial", 7);
    _exit(0);
  }
  waitpid(killed, &status, 0);
  auto r = test::run(small_run(test::tiny_model(), dir.path(), "--prompt x"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "(left by a killed writer)")) << r.output;
  for (const std::string& name : names_in(dir.path())) EXPECT_FALSE(has(name, ".tmp.")) << name;
}

// A rerun with other settings lists the images they would replace, each prompt cut to about 40
// bytes: a cut inside a UTF-8 character made nlohmann's dump() throw, and the run ended with
// "[json.exception.type_error.316]" instead of naming the images.
TEST(HostileInputs, ChangedPromptsAreShownCutBetweenCharacters) {
  TempDir dir;
  const std::string stem(36, 'a');
  ASSERT_EQ(test::run(small_run(test::tiny_model(), dir / "out", "--prompt '" + stem + "\u00e9\u00e9 one'")).status, 0);
  auto r = test::run(small_run(test::tiny_model(), dir / "out", "--prompt '" + stem + "\u00e9\u00e9 two'"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "1 image(s) there were made with other settings than this run asks for")) << r.output;
  EXPECT_TRUE(has(r.output, "prompt \"" + stem + "...\", now \"" + stem + "...\"")) << r.output;
  EXPECT_FALSE(has(r.output, "type_error")) << r.output;
}
