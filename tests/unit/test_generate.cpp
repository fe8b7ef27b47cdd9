// `ditbatch generate` end to end on the tiny model: PNGs with their settings inside, the
// manifest, reproducible bytes, resume (also after kill -9), the NaN guard, early errors.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "core/sha256.h"
#include "io/h5.h"
#include "io/manifest.h"
#include "io/png_io.h"
#include "io/weight_store.h"
#include "test_util.h"
#include "tiny_model.h"

using namespace ditbatch;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string generate_cmd(const std::string& out, const std::string& extra) {
  return fmt::format("{} generate --weights {} --out {} --width 64 --height 48 --steps 4 {}", test::exe(),
                     test::tiny_model(), out, extra);
}

std::map<std::string, std::string> text_of(const PngImage& png) {
  return std::map<std::string, std::string>(png.text.begin(), png.text.end());
}

// The long runs below (1000 tiny steps) use --threads 1: with ctest -j2 several runs share the
// 2 cores, and every OpenMP barrier of a multi-threaded run then waits for a time slice (a
// hundred times slower); a single thread only shares the cores.

// The data of DIR/report.html as its script reads it.
nlohmann::json report_data(const std::string& dir) {
  const std::string page = test::read_text(dir + "/report.html");
  const std::string open = "<script type=\"application/json\" id=\"report-data\">";
  const size_t from = page.find(open);
  if (from == std::string::npos) return nullptr;
  const size_t begin = from + open.size();
  return nlohmann::json::parse(page.substr(begin, page.find("</script>", begin) - begin));
}

}  // namespace

using test::Child;
using test::log_has;
using test::pngs_in;

TEST(Generate, PngsCarryTheirSettingsAndTheManifestRecordsThem) {
  TempDir dir;
  test::write_text(dir / "p.jsonl",
                   "{\"prompt\": \"A red fox in the snow\", \"seed\": 7}\n"
                   "{\"prompt\": \"東京の夜景 🌃\", \"negative_prompt\": null, \"name\": \"tokyo\"}\n"
                   "{\"prompt\": \"a quiet lake\", \"negative_prompt\": \"\", \"name\": \"lake\"}\n");
  const auto unix_seconds = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  const double before = unix_seconds();
  auto r = test::run(generate_cmd(dir / "out", "--prompts " + (dir / "p.jsonl") + " --seed 100"));
  const double after = unix_seconds();
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(pngs_in(dir / "out"),
            (std::vector<std::string>{"000000-a-red-fox-in-the-snow.png", "lake.png", "tokyo.png"}));

  const std::string checksum = WeightStore::open(test::tiny_model()).checksum();
  PngImage fox = read_png(dir / "out/000000-a-red-fox-in-the-snow.png");
  EXPECT_EQ(fox.width, 64);
  EXPECT_EQ(fox.height, 48);
  auto t = text_of(fox);
  EXPECT_EQ(t["prompt"], "A red fox in the snow");
  EXPECT_EQ(t["negative_prompt"], " ");
  EXPECT_EQ(t["seed"], "7");
  EXPECT_EQ(t["steps"], "4");
  EXPECT_EQ(t["cfg"], "4");
  EXPECT_EQ(t["size"], "64x48");
  EXPECT_EQ(t["model_checksum"], checksum);
  EXPECT_NE(t["scheduler"].find("shift_terminal=0.02"), std::string::npos) << t["scheduler"];
  EXPECT_NE(t["software"].find("ditbatch"), std::string::npos);
  EXPECT_EQ(t["parameters"].rfind("A red fox in the snow\nNegative prompt:  \nSteps: 4, Sampler: FlowMatchEulerDiscrete, "
                                  "CFG scale: 4, Seed: 7, Size: 64x48",
                                  0),
            0u)
      << t["parameters"];
  auto tokyo = text_of(read_png(dir / "out/tokyo.png"));
  EXPECT_EQ(tokyo["prompt"], "東京の夜景 🌃");  // UTF-8 through iTXt
  EXPECT_EQ(tokyo["seed"], "101");            // --seed + index
  EXPECT_EQ(tokyo["cfg"], "1");               // "negative_prompt": null is diffusers' None: no CFG
  EXPECT_EQ(tokyo["parameters"].find("Negative prompt"), std::string::npos);
  // "" is a negative prompt like any other, as in diffusers (has_neg_prompt = is not None).
  auto lake = text_of(read_png(dir / "out/lake.png"));
  EXPECT_EQ(lake["cfg"], "4");
  EXPECT_EQ(lake["negative_prompt"], "");
  EXPECT_NE(lake["parameters"].find("Negative prompt: \nSteps"), std::string::npos) << lake["parameters"];

  auto manifest = read_manifest(dir / "out");
  ASSERT_EQ(manifest.size(), 3u);
  EXPECT_FALSE(fs::exists(dir / "out/.manifest")) << "parts are merged and removed at the end";
  const auto& line = manifest.at(0);
  EXPECT_EQ(line["status"], "ok");
  EXPECT_EQ(line["file"], "000000-a-red-fox-in-the-snow.png");
  EXPECT_EQ(line["seed"], 7);
  EXPECT_EQ(line["sha256"], sha256_file(dir / "out/000000-a-red-fox-in-the-snow.png"));
  EXPECT_EQ(line["model_checksum"], checksum);
  for (const char* k : {"text_encoder_s", "transformer_s", "vae_s", "total_s", "write_s"})
    EXPECT_TRUE(line["timings"].contains(k)) << k;
  // The start (for the report's timeline): milliseconds UTC, within the run as this test's clock saw it.
  const std::string started = line["started"];
  std::tm tm{};
  int ms = -1;
  ASSERT_EQ(std::sscanf(started.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                        &tm.tm_min, &tm.tm_sec, &ms), 7) << started;
  tm.tm_year -= 1900, tm.tm_mon -= 1;
  const double start = static_cast<double>(timegm(&tm)) + ms / 1000.0;
  EXPECT_GE(start, before - 0.001);
  EXPECT_LE(start + line["timings"]["total_s"].get<double>(), after);
  EXPECT_FALSE(line["run_id"].get<std::string>().empty());
  EXPECT_EQ(line["run_id"], manifest.at(1)["run_id"]);
  EXPECT_EQ(manifest.at(1)["true_cfg"], false);
}

TEST(Generate, SameJobTwiceGivesIdenticalBytesAndResumeSkipsCompleteImages) {
  TempDir dir;
  const std::string prompts = "--prompt 'a lighthouse' --prompt 'a forest' --prompt 'a city'";
  ASSERT_EQ(test::run(generate_cmd(dir / "a", prompts)).status, 0);
  ASSERT_EQ(test::run(generate_cmd(dir / "b", prompts)).status, 0);
  ASSERT_EQ(pngs_in(dir / "a").size(), 3u);
  for (const auto& name : pngs_in(dir / "a"))
    EXPECT_EQ(test::read_text(dir / ("a/" + name)), test::read_text(dir / ("b/" + name))) << name;

  auto again = test::run(generate_cmd(dir / "a", prompts));
  EXPECT_EQ(again.status, 0);
  EXPECT_NE(again.output.find("0 done, 3 skipped, 0 failed"), std::string::npos) << again.output;

  // A deleted PNG and a cut one are made again; the complete one is skipped.
  const auto names = pngs_in(dir / "a");
  fs::remove(dir / ("a/" + names[0]));
  const std::string cut = test::read_text(dir / ("a/" + names[1]));
  test::write_text(dir / ("a/" + names[1]), cut.substr(0, cut.size() / 2));
  auto resumed = test::run(generate_cmd(dir / "a", prompts));
  EXPECT_EQ(resumed.status, 0);
  EXPECT_NE(resumed.output.find("2 done, 1 skipped, 0 failed"), std::string::npos) << resumed.output;
  for (const auto& name : names) EXPECT_EQ(test::read_text(dir / ("a/" + name)), test::read_text(dir / ("b/" + name)));
  EXPECT_EQ(read_manifest(dir / "a").size(), 3u);

  auto overwrite = test::run(generate_cmd(dir / "a", prompts + " --overwrite"));
  EXPECT_NE(overwrite.output.find("3 done, 0 skipped"), std::string::npos) << overwrite.output;
}

// A rerun into a folder whose images were made with other settings must not pass them off as
// this run's images (skipped as complete) nor replace them unasked: it stops before any work.
TEST(Generate, RerunWithOtherSettingsIsRefusedAndLeavesTheFolderAlone) {
  TempDir dir;
  const std::string prompts = "--prompt 'a lighthouse' --prompt 'a forest' --cfg 4.1";
  ASSERT_EQ(test::run(generate_cmd(dir / "out", prompts)).status, 0);
  const auto names = pngs_in(dir / "out");
  ASSERT_EQ(names.size(), 2u);
  auto same = test::run(generate_cmd(dir / "out", prompts));  // cfg 4.1 is stored as a double: still the same
  EXPECT_EQ(same.status, 0);
  EXPECT_NE(same.output.find("0 done, 2 skipped, 0 failed"), std::string::npos) << same.output;

  auto folder = [&] {
    std::map<std::string, std::string> bytes;
    for (const auto& e : fs::recursive_directory_iterator(dir / "out"))  // the run records in .runs/ too
      if (e.is_regular_file()) bytes[fs::relative(e.path(), dir / "out")] = test::read_text(e.path());
    return bytes;
  };
  const auto before = folder();
  auto seed = test::run(generate_cmd(dir / "out", prompts + " --seed 9"));
  EXPECT_EQ(seed.status, 2) << seed.output;
  EXPECT_NE(seed.output.find("2 image(s) there were made with other settings"), std::string::npos) << seed.output;
  EXPECT_NE(seed.output.find(names[0] + " (seed 0, now 9)"), std::string::npos) << seed.output;
  EXPECT_NE(seed.output.find("--overwrite"), std::string::npos) << seed.output;
  EXPECT_EQ(seed.output.find("loaded"), std::string::npos) << "refused before any weight is read: " << seed.output;
  EXPECT_EQ(folder(), before);

  auto cfg = test::run(generate_cmd(dir / "out", "--prompt 'a lighthouse' --prompt 'a forest' --cfg 3"));
  EXPECT_EQ(cfg.status, 2);
  EXPECT_NE(cfg.output.find("(cfg 4.1, now 3)"), std::string::npos) << cfg.output;

  // Another model: its checksum differs (make-tiny with another seed writes other weights).
  ASSERT_EQ(test::run(test::exe() + " make-tiny --seed 4 --out " + (dir / "other.h5")).status, 0);
  const std::string other_cmd = fmt::format("{} generate --weights {} --out {} --width 64 --height 48 --steps 4 {}",
                                            test::exe(), dir / "other.h5", dir / "out", prompts);
  auto model = test::run(other_cmd);
  EXPECT_EQ(model.status, 2);
  EXPECT_NE(model.output.find("model checksum " + WeightStore::open(test::tiny_model()).checksum().substr(0, 12) +
                              ", now " + WeightStore::open(dir / "other.h5").checksum().substr(0, 12)),
            std::string::npos)
      << model.output;
  EXPECT_EQ(folder(), before);

  // Another prompt list: other files at the same indices, whose manifest lines would be dropped.
  auto list = test::run(generate_cmd(dir / "out", "--prompt 'a harbour' --prompt 'a forest' --cfg 4.1"));
  EXPECT_EQ(list.status, 2);
  EXPECT_NE(list.output.find("1 image(s)"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find(names[0] + " (now 000000-a-harbour.png; prompt \"a lighthouse\", now \"a harbour\")"),
            std::string::npos)
      << list.output;
  EXPECT_EQ(folder(), before);

  // A PNG that is gone is not an image to lose: only the one left is named.
  fs::remove(dir / ("out/" + names[0]));
  auto one = test::run(generate_cmd(dir / "out", prompts + " --seed 9"));
  EXPECT_EQ(one.status, 2);
  EXPECT_NE(one.output.find("1 image(s)"), std::string::npos) << one.output;
  EXPECT_EQ(one.output.find(names[0]), std::string::npos) << one.output;

  auto overwrite = test::run(generate_cmd(dir / "out", prompts + " --seed 9 --overwrite"));
  EXPECT_EQ(overwrite.status, 0) << overwrite.output;
  EXPECT_NE(overwrite.output.find("2 done, 0 skipped"), std::string::npos) << overwrite.output;
  EXPECT_EQ(text_of(read_png(dir / ("out/" + names[1])))["seed"], "10");
  auto again = test::run(generate_cmd(dir / "out", prompts + " --seed 9"));
  EXPECT_NE(again.output.find("0 done, 2 skipped"), std::string::npos) << again.output;

  // --overwrite with another prompt list: the first list's PNG at index 0 is listed by no line
  // once the new image's line is in, so it goes; the one of the same name is replaced in place.
  auto other = test::run(generate_cmd(dir / "out", "--prompt 'a harbour' --prompt 'a forest' --overwrite"));
  EXPECT_EQ(other.status, 0) << other.output;
  EXPECT_NE(other.output.find("removed 1 file(s) of the images this run replaced under other names (" + names[0]),
            std::string::npos)
      << other.output;
  std::set<std::string> listed;
  for (const auto& [index, line] : read_manifest(dir / "out")) listed.insert(line["file"].get<std::string>());
  const auto files = pngs_in(dir / "out");
  EXPECT_EQ(std::set<std::string>(files.begin(), files.end()), listed);
  EXPECT_EQ(listed, (std::set<std::string>{"000000-a-harbour.png", "000001-a-forest.png"}));
}

// --max-sequence-length decides the image only for a prompt longer than it: the manifest
// records each prompt's encoder rows, so a rerun with another limit is refused exactly when
// some image would change. "a cat" is 2 tokens + the template's 5 after the dropped 34
// (<|im_end|> \n <|im_start|> assistant \n); the negative " " is 1 + 5.
TEST(Generate, TheTokenLimitCountsWhereAPromptIsLongerThanIt) {
  TempDir dir;
  ASSERT_EQ(test::run(generate_cmd(dir / "out", "--prompt 'a cat'")).status, 0);
  const auto line = read_manifest(dir / "out").at(0);
  EXPECT_EQ(line["prompt_tokens"], 7);
  EXPECT_EQ(line["negative_prompt_tokens"], 6);
  EXPECT_EQ(line["max_sequence_length"], 512);
  EXPECT_EQ(text_of(read_png(dir / "out/000000-a-cat.png"))["max_sequence_length"], "512");

  auto same = test::run(generate_cmd(dir / "out", "--prompt 'a cat' --max-sequence-length 7"));
  EXPECT_EQ(same.status, 0) << same.output;
  EXPECT_NE(same.output.find("0 done, 1 skipped"), std::string::npos) << same.output;
  auto cut = test::run(generate_cmd(dir / "out", "--prompt 'a cat' --max-sequence-length 6"));
  EXPECT_EQ(cut.status, 2) << cut.output;
  EXPECT_NE(cut.output.find("(max_sequence_length 512, now 6 (prompt_tokens of 7 tokens))"), std::string::npos)
      << cut.output;

  auto short_limit = test::run(generate_cmd(dir / "cut", "--prompt 'a cat' --max-sequence-length 4"));
  EXPECT_EQ(short_limit.status, 0) << short_limit.output;
  EXPECT_NE(short_limit.output.find("the prompt has 7 tokens; the first 4 are used"), std::string::npos)
      << short_limit.output;
  EXPECT_NE(read_manifest(dir / "cut").at(0)["sha256"], line["sha256"]);

  auto bad = test::run(generate_cmd(dir / "bad", "--prompt x --max-sequence-length 2000"));
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("--max-sequence-length 2000: must be 1..1024"), std::string::npos) << bad.output;
  EXPECT_EQ(bad.output.find("loaded"), std::string::npos) << "refused before loading: " << bad.output;
}

TEST(Generate, KilledRunLeavesNoPartialPngAndResumes) {
  TempDir dir;
  // Image 2 is slow (1000 steps at 128², seconds): killed once two PNGs exist, the run is inside
  // it whatever the machine's load, so the kill always lands mid-run.
  std::string jsonl;
  for (int i = 0; i < 6; ++i)
    jsonl += fmt::format("{{\"prompt\": \"scene number {}\"{}}}\n", i,
                         i == 2 ? ", \"steps\": 1000, \"width\": 128, \"height\": 128" : "");
  test::write_text(dir / "p.jsonl", jsonl);
  const std::string prompts = "--threads 1 --prompts " + (dir / "p.jsonl");
  ASSERT_EQ(test::run(generate_cmd(dir / "ref", prompts)).status, 0);

  Child run(generate_cmd(dir / "out", prompts), dir / "log.txt");
  const bool two = run.wait_until([&] { return fs::exists(dir / "out") && pngs_in(dir / "out").size() >= 2; });
  run.signal(SIGKILL);
  const int status = run.wait();
  ASSERT_TRUE(two) << "no two PNGs: " << test::read_text(dir / "log.txt");
  ASSERT_TRUE(WIFSIGNALED(status)) << test::read_text(dir / "log.txt");
  const auto partial = pngs_in(dir / "out");
  EXPECT_LT(partial.size(), 6u) << "the run finished before the kill; the test proves nothing";
  for (const auto& name : partial) EXPECT_TRUE(png_is_complete(dir / ("out/" + name))) << name;

  auto resumed = test::run(generate_cmd(dir / "out", prompts));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(pngs_in(dir / "out"), pngs_in(dir / "ref"));
  for (const auto& name : pngs_in(dir / "ref"))
    EXPECT_EQ(test::read_text(dir / ("out/" + name)), test::read_text(dir / ("ref/" + name))) << name;
  auto manifest = read_manifest(dir / "out");
  EXPECT_EQ(manifest.size(), 6u);
  for (const auto& [i, line] : manifest) EXPECT_EQ(line["status"], "ok");
}

TEST(Generate, NanWeightFailsTheImageNotTheRun) {
  TempDir dir;
  // A checkpoint holding a NaN, converted as it is (an edit in place is refused: its digest).
  test::rewrite_weights(test::tiny_model(), dir / "nan.h5",
                        {.tensor = [](const std::string& component, const std::string& name, Tensor& t) {
                          if (component == "transformer" && name == "proj_out.bias") t.data<float>()[5] = std::nanf("");
                        }});
  auto r = test::run(fmt::format("{} generate --weights {} --out {} --width 32 --height 32 --steps 2 --prompt a --prompt b",
                                 test::exe(), dir / "nan.h5", dir / "out"));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("0 done, 0 skipped, 2 failed"), std::string::npos) << r.output;
  EXPECT_TRUE(pngs_in(dir / "out").empty());
  auto manifest = read_manifest(dir / "out");
  ASSERT_EQ(manifest.size(), 2u);
  EXPECT_EQ(manifest.at(1)["status"], "failed");
  EXPECT_NE(manifest.at(1)["error"].get<std::string>().find("NaN"), std::string::npos);
}

// A weight file of a family ditbatch does not run (its pipeline class, from model_index.json) is
// refused before anything is made, naming the class and what ditbatch runs; inspect still
// describes it. A file whose class says 2.1 but whose components are Qwen-Image's is refused by
// the 2.1 family's config check, naming the file, before the output folder exists.
TEST(Generate, AWeightFileOfAnotherFamilyIsRefusedNamingIt) {
  TempDir dir;
  test::rewrite_weights(test::tiny_model(), dir / "other.h5", {.root = [](const std::string& attr, std::string& value) {
                          if (attr == "pipeline_class") value = "FluxPipeline";
                        }});
  auto r = test::run(fmt::format("{} generate --weights {} --out {} --width 32 --height 32 --steps 2 --prompt a",
                                 test::exe(), dir / "other.h5", dir / "out"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("other.h5: pipeline class 'FluxPipeline': ditbatch runs QwenImagePipeline, "
                          "QwenImage21Pipeline"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "out")) << "the output folder was made before the file was refused";
  r = test::run(fmt::format("{} inspect {}", test::exe(), dir / "other.h5"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("pipeline_class: FluxPipeline"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(no estimate: "), std::string::npos) << r.output;

  test::rewrite_weights(test::tiny_model(), dir / "mislabelled.h5", {.root = [](const std::string& attr, std::string& value) {
                          if (attr == "pipeline_class") value = "QwenImage21Pipeline";
                        }});
  r = test::run(fmt::format("{} generate --weights {} --out {} --prompt a", test::exe(), dir / "mislabelled.h5",
                            dir / "out"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("mislabelled.h5"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// A full output folder (here a 300 KB tmpfs: one 256x256 noise PNG of ~200 KB fits) stops the
// run at the first image it cannot save, instead of spending the allocation on images that
// all fail; a rerun with space makes the rest.
TEST(Generate, AFullOutputFolderStopsTheRun) {
  TempDir dir;
  fs::create_directories(dir / "out");
  if (test::run("mount -t tmpfs -o size=300k tmpfs " + (dir / "out")).status != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root and CAP_SYS_ADMIN)";
  struct Unmount {
    std::string path;
    ~Unmount() { test::run("umount " + path); }
  } unmount{dir / "out"};
  std::string prompts;
  for (int i = 0; i < 4; ++i) prompts += fmt::format(" --prompt 'noise {}'", i);
  const std::string cmd = fmt::format("{} generate --weights {} --out {} --width 256 --height 256 --steps 2 {}",
                                      test::exe(), test::tiny_model(), dir / "out", prompts);
  auto r = test::run(cmd);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("image 1 (--prompt #2) failed: cannot write the output"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stopping: " + (dir / "out") + " cannot be written"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 done, 0 skipped, 1 failed"), std::string::npos) << r.output;
  EXPECT_EQ(pngs_in(dir / "out").size(), 1u);

  ASSERT_EQ(test::run("mount -o remount,size=4m " + (dir / "out")).status, 0);
  auto rerun = test::run(cmd);
  EXPECT_EQ(rerun.status, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("3 done, 1 skipped, 0 failed"), std::string::npos) << rerun.output;
}

TEST(Generate, LatentOutputBesideThePng) {
  TempDir dir;
  ASSERT_EQ(test::run(generate_cmd(dir / "out", "--prompt x --output-type latent")).status, 0);
  h5::File f = h5::File::open_read(dir / "out/000000-x.latents.h5");
  EXPECT_EQ(f.root().dataset_info("latents").shape, (Shape{1, 12, 64}));  // 48x64 px -> 3x4 tokens
  EXPECT_EQ(f.root().attr_int("seed"), 0);
  const auto line = read_manifest(dir / "out").at(0);
  EXPECT_EQ(line["latents_file"], "000000-x.latents.h5");
  EXPECT_EQ(line["latents_sha256"], sha256_file(dir / "out/000000-x.latents.h5"));

  // The latents are part of an --output-type latent image: a rerun makes a lost file again,
  // and a folder made as PNGs only gets its latents when asked for them.
  const std::string bytes = test::read_text(dir / "out/000000-x.latents.h5");
  fs::remove(dir / "out/000000-x.latents.h5");
  auto again = test::run(generate_cmd(dir / "out", "--prompt x --output-type latent"));
  EXPECT_NE(again.output.find("1 done, 0 skipped"), std::string::npos) << again.output;
  EXPECT_EQ(test::read_text(dir / "out/000000-x.latents.h5"), bytes);
  ASSERT_EQ(test::run(generate_cmd(dir / "png", "--prompt x")).status, 0);
  auto latents = test::run(generate_cmd(dir / "png", "--prompt x --output-type latent"));
  EXPECT_NE(latents.output.find("1 done, 0 skipped"), std::string::npos) << latents.output;
  EXPECT_EQ(test::read_text(dir / "png/000000-x.latents.h5"), bytes);
  auto same = test::run(generate_cmd(dir / "png", "--prompt x --output-type latent"));
  EXPECT_NE(same.output.find("0 done, 1 skipped"), std::string::npos) << same.output;
}

TEST(Generate, BadInputIsReportedBeforeAnyWork) {
  TempDir dir;
  test::write_text(dir / "bad.jsonl", "{\"prompt\": \"ok\"}\n{\"prompt\": \"x\", \"steps\": \"many\"}\n");
  auto r = test::run(generate_cmd(dir / "out", "--prompts " + (dir / "bad.jsonl")));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("bad.jsonl:2: \"steps\" must be an integer"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out")) << "nothing is created for a bad prompt file";

  r = test::run(fmt::format("{} generate --weights {} --out {} --prompt x", test::exe(), dir / "missing.h5", dir / "out"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("missing.h5: no such file"), std::string::npos) << r.output;

  test::write_text(dir / "a-file", "x");
  r = test::run(generate_cmd(dir / "a-file/out", "--prompt x"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("cannot create the folder"), std::string::npos) << r.output;

  r = test::run(generate_cmd(dir / "out", ""));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("give either --prompt"), std::string::npos) << r.output;

  r = test::run(fmt::format("{} generate --weights {} --out {} --prompt x --width 0", test::exe(), test::tiny_model(),
                            dir / "out"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("width 0 is out of range"), std::string::npos) << r.output;

  // Boost alone reads "-3" into the unsigned seed as 2^64 - 3.
  r = test::run(generate_cmd(dir / "stray", "--prompt x --seed -3"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--seed -3: expected an integer from 0 to 18446744073709551615"), std::string::npos)
      << r.output;
  r = test::run(generate_cmd(dir / "stray", "--prompt x --array-index -2"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--array-index -2 must be at least 0"), std::string::npos) << r.output;

  // An unquoted prompt: Boost alone would make an image of "a" and drop the rest.
  r = test::run(generate_cmd(dir / "stray", "--prompt a red fox"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("unexpected argument 'red'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "stray"));
  r = test::run(fmt::format("{} inspect {} {}", test::exe(), test::tiny_model(), "second.h5"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("unexpected argument 'second.h5'"), std::string::npos) << r.output;
  r = test::run(test::exe() + " inspect");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("missing the file argument (usage: ditbatch inspect FILE.h5"), std::string::npos) << r.output;

  fs::create_directories(dir / "odd/manifest.jsonl");
  r = test::run(generate_cmd(dir / "odd", "--prompt x"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("manifest.jsonl is not a file"), std::string::npos) << r.output;
}

TEST(Generate, StopSignalFinishesTheImageAndAsksForARequeue) {
  TempDir dir;
  std::string prompts;
  for (int i = 0; i < 16; ++i) prompts += fmt::format(" --prompt 'p{}'", i);
  Child run(generate_cmd(dir / "out", prompts + " --log-level debug"), dir / "log.txt");
  // Signalled inside image 1.
  ASSERT_TRUE(run.wait_until([&] { return log_has(dir / "log.txt", "image 1 (000001-p1): denoising"); }))
      << test::read_text(dir / "log.txt");
  run.signal(SIGUSR1);
  const int status = run.wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 75) << test::read_text(dir / "log.txt");
  EXPECT_NE(test::read_text(dir / "log.txt").find("taking no new images"), std::string::npos);
  EXPECT_NE(test::read_text(dir / "log.txt").find("] [rank 0/1] [warning] SIGUSR1 (signal 10) received: taking no new image;"),
            std::string::npos);
  const size_t made = pngs_in(dir / "out").size();
  // Every image started before the run noticed the signal is finished, and none starts after it.
  // (How many started first depends on when the signal lands: image 1 was in progress when it
  // was sent, and a loaded machine may let image 2 start before it arrives.)
  const std::string log = test::read_text(dir / "log.txt");
  const size_t noticed = log.find(" received: ");
  ASSERT_NE(noticed, std::string::npos) << log;
  auto images_started = [&](size_t from, size_t to) {
    size_t n = 0;
    for (size_t at = log.find("): denoising,", from); at < to; at = log.find("): denoising,", at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(images_started(noticed, std::string::npos), 0u) << log;
  EXPECT_EQ(made, images_started(0, noticed)) << log;
  EXPECT_GE(made, 2u);
  EXPECT_LT(made, 16u);
  EXPECT_EQ(read_manifest(dir / "out").size(), made);  // the manifest was flushed and merged
  const nlohmann::json stopped = report_data(dir / "out");  // the report is written after a stop too
  ASSERT_TRUE(stopped.is_object());
  EXPECT_EQ(stopped["images"].size(), made);
  ASSERT_EQ(stopped["runs"].size(), 1u);
  EXPECT_TRUE(stopped["runs"][0]["stopped_by_signal"].get<bool>());
  auto resumed = test::run(generate_cmd(dir / "out", prompts));
  EXPECT_EQ(resumed.status, 0);
  EXPECT_EQ(pngs_in(dir / "out").size(), 16u);
  const nlohmann::json whole = report_data(dir / "out");  // rewritten on resume: the whole folder
  ASSERT_TRUE(whole.is_object());
  EXPECT_EQ(whole["images"].size(), 16u);
  ASSERT_EQ(whole["runs"].size(), 2u);
  EXPECT_FALSE(whole["runs"][1]["stopped_by_signal"].get<bool>());
  EXPECT_EQ(whole["runs"][1]["done"], 16 - static_cast<int64_t>(made));
}

// The first signal is acknowledged at the next denoising step (not minutes later when the
// image ends); a second one abandons the image; the last line says how many are left.
TEST(Generate, ASecondSignalAbandonsTheImageBeingFinished) {
  std::string prompts;
  for (int i = 0; i < 4; ++i) prompts += fmt::format(" --prompt 'q{}'", i);
  // Long images (1000 tiny steps at 256², seconds); the signals go once image 1's denoising has
  // begun (its debug line), so they land in its steps however loaded the machine.
  TempDir dir;
  const std::string log_path = dir / "log.txt";
  Child run(fmt::format("{} generate --weights {} --out {} --width 256 --height 256 --steps 1000 --threads 1 "
                        "--log-level debug {}",
                        test::exe(), test::tiny_model(), dir / "out", prompts),
            log_path);
  ASSERT_TRUE(run.wait_until([&] { return log_has(log_path, "image 1 (000001-q1): denoising"); }))
      << test::read_text(log_path);
  // Two signals at once are one event (preemption's SIGTERM to the ranks and the script's
  // SIGUSR1): the image is still finished.
  run.signal(SIGUSR1);
  run.signal(SIGTERM);
  ASSERT_TRUE(run.wait_until([&] { return log_has(log_path, "received: finishing image 1 ("); }))
      << test::read_text(log_path);
  // A second request over a second later abandons the image.
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  EXPECT_EQ(test::read_text(log_path).find("abandoning"), std::string::npos) << test::read_text(log_path);
  run.signal(SIGUSR1);
  const int status = run.wait();
  const std::string log = test::read_text(log_path);
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 75) << log;
  EXPECT_NE(log.find("of 1000 steps left), then stopping; a second signal (a second or more later) abandons it"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("abandoning image 1 (000001-q1)"), std::string::npos) << log;
  EXPECT_NE(log.find("stopped by a signal with 3 image(s) left"), std::string::npos) << log;
  EXPECT_EQ(pngs_in(dir / "out"), (std::vector<std::string>{"000000-q0.png"}));
  EXPECT_EQ(read_manifest(dir / "out").size(), 1u);
}

// The same job started twice (a double sbatch) would make every image twice: the second run
// is refused while the first holds its images, naming it, and so is a run whose images overlap
// (the job without slices); another slice of the job runs beside it, and once the first run
// has ended (here: stopped by a signal, or done) a rerun goes ahead.
TEST(Generate, ASecondRunOfTheSameSliceIsRefused) {
  TempDir dir;
  std::string prompts;
  for (int i = 0; i < 8; ++i) prompts += fmt::format(" --prompt 'r{}'", i);
  auto job = [&](int slice) {
    return fmt::format("{} generate --weights {} --out {} --width 128 --height 128 --steps 1000 {} --array-index {} "
                       "--array-count 2 --threads 1",
                       test::exe(), test::tiny_model(), dir / "out", prompts, slice);
  };
  Child run(job(0), dir / "first.log");
  ASSERT_TRUE(run.wait_until([&] { return log_has(dir / "first.log", "loaded"); })) << test::read_text(dir / "first.log");
  auto second = test::run(job(0));
  EXPECT_EQ(second.status, 2) << second.output;
  EXPECT_NE(second.output.find(fmt::format("another ditbatch run (pid {} on ", run.pid())), std::string::npos)
      << second.output;
  EXPECT_NE(second.output.find(") is making images 0..3 in " + (dir / "out") + ", of the images 0..3 this run"),
            std::string::npos)
      << second.output;
  // The whole job without slices overlaps the running slice too.
  auto whole = test::run(fmt::format("{} generate --weights {} --out {} --width 128 --height 128 --steps 1000 --threads 1 {}",
                                     test::exe(), test::tiny_model(), dir / "out", prompts));
  EXPECT_EQ(whole.status, 2) << whole.output;
  EXPECT_NE(whole.output.find("is making images 0..3 in " + (dir / "out") + ", of the images 0..7 this run"),
            std::string::npos)
      << whole.output;
  auto other_slice = test::run(job(1));
  EXPECT_EQ(other_slice.status, 0) << other_slice.output;
  EXPECT_NE(other_slice.output.find("4 done, 0 skipped, 0 failed"), std::string::npos) << other_slice.output;
  run.signal(SIGUSR1);  // it may have finished meanwhile
  const int status = run.wait();
  EXPECT_TRUE(WIFEXITED(status) && (WEXITSTATUS(status) == 75 || WEXITSTATUS(status) == 0))
      << test::read_text(dir / "first.log");
  auto after = test::run(job(0));
  EXPECT_EQ(after.status, 0) << after.output;
  EXPECT_EQ(pngs_in(dir / "out").size(), 8u);
}

// A signal during the last image leaves nothing to resume: exit 0, not 75 (which makes the
// job script requeue a finished job).
TEST(Generate, ASignalDuringTheLastImageEndsTheRunNormally) {
  TempDir dir;
  const std::string log_path = dir / "log.txt";
  Child run(fmt::format("{} generate --weights {} --out {} --width 256 --height 256 --steps 1000 --threads 1 "
                        "--log-level debug --prompt only",
                        test::exe(), test::tiny_model(), dir / "out"),
            log_path);
  ASSERT_TRUE(run.wait_until([&] { return log_has(log_path, "image 0 (000000-only): denoising"); }))
      << test::read_text(log_path);
  run.signal(SIGUSR1);  // inside image 0's steps
  const int status = run.wait();
  const std::string log = test::read_text(log_path);
  EXPECT_NE(log.find("received: finishing image 0"), std::string::npos) << log;
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 0) << log;
  EXPECT_NE(log.find("1 done, 0 skipped, 0 failed"), std::string::npos) << log;
  EXPECT_NE(log.find("nothing is left to make"), std::string::npos) << log;
}

// A setting given twice takes its last value (the job scripts append DITBATCH_EXTRA_ARGS to
// DITBATCH_ARGS); a switch given twice is that switch.
TEST(Generate, TheLastValueOfARepeatedOptionWins) {
  TempDir dir;
  auto r = test::run(generate_cmd(dir / "out", "--prompt x --steps 3 --seed=1 --seed 2 --overwrite --overwrite"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto t = text_of(read_png(dir / "out/000000-x.png"));
  EXPECT_EQ(t["steps"], "3");  // generate_cmd says --steps 4 first
  EXPECT_EQ(t["seed"], "2");
}

TEST(Generate, OffloadingTheTextEncoderChangesNothingInTheImages) {
  TempDir dir;
  const std::string prompts = "--prompt 'a lighthouse' --prompt 'a forest' --negative-prompt 'blurry'";
  ASSERT_EQ(test::run(generate_cmd(dir / "a", prompts)).status, 0);
  auto r = test::run(generate_cmd(dir / "b", prompts + " --offload-text-encoder"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("encoded 3 prompts"), std::string::npos) << r.output;  // 2 prompts + 1 negative
  EXPECT_NE(r.output.find("releasing the text encoder"), std::string::npos) << r.output;
  ASSERT_EQ(pngs_in(dir / "a").size(), 2u);
  for (const auto& name : pngs_in(dir / "a"))
    EXPECT_EQ(test::read_text(dir / ("a/" + name)), test::read_text(dir / ("b/" + name))) << name;
}
