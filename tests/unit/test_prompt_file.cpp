// Prompt files (.txt and .jsonl) and the resolution of prompts into image jobs.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>

#include "core/error.h"
#include "io/prompt_file.h"
#include "pipeline/job.h"
#include "test_util.h"

using namespace ditbatch;
namespace fs = std::filesystem;

namespace {

std::vector<ImageJob> jobs_of(const std::string& text, const std::string& name, GenerationDefaults d = {}) {
  return resolve_jobs(parse_prompt_text(text, name), d, Log::quiet());
}

}  // namespace

TEST(PromptFile, TxtSkipsBlankAndCommentLinesAndKeepsTextVerbatim) {
  auto e = parse_prompt_text("# a comment\nA red fox\n\n   \n  leading spaces kept\r\nlast without newline", "p.txt");
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].prompt, "A red fox");
  EXPECT_EQ(e[0].origin, "p.txt:2");
  EXPECT_EQ(e[1].prompt, "  leading spaces kept");  // CRLF's CR removed, spaces kept
  EXPECT_EQ(e[2].prompt, "last without newline");
  EXPECT_EQ(e[2].origin, "p.txt:6");
}

// A byte order mark is not text: "\xEF\xBB\xBF# header" is a comment, and a first prompt
// with a BOM is the same prompt (the same tokens, the same image) as without one.
TEST(PromptFile, ByteOrderMarkAndIndentedCommentsAreNotPrompts) {
  auto e = parse_prompt_text("\xEF\xBB\xBF# header\nfirst\n  # indented comment\n\t# tab comment\nsecond #3", "p.txt");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].prompt, "first");
  EXPECT_EQ(e[0].origin, "p.txt:2");
  EXPECT_EQ(e[1].prompt, "second #3");
  auto b = parse_prompt_text("\xEF\xBB\xBF" "first\n", "p.txt");
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].prompt, "first");
  auto j = parse_prompt_text("\xEF\xBB\xBF{\"prompt\": \"a\"}\n", "p.jsonl");
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0].prompt, "a");
  // Only at the start of the file: elsewhere U+FEFF is a character of the prompt.
  EXPECT_EQ(parse_prompt_text("a\n\xEF\xBB\xBF" "b\n", "p.txt")[1].prompt, "\xEF\xBB\xBF" "b");
}

TEST(PromptFile, AFolderIsNotAPromptFile) {
  test::TempDir dir;
  fs::create_directories(dir / "prompts.txt");
  try {
    read_prompt_file(dir / "prompts.txt");
    FAIL() << "a folder was read as a prompt file";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("prompts.txt: is a folder, not a file"), std::string::npos) << e.what();
  }
}

TEST(PromptFile, JsonlFieldsAndDefaults) {
  const std::string text =
      R"({"prompt": "a cat", "seed": 42, "width": 512, "height": 256, "steps": 20, "cfg": 2.5, "name": "cat"})"
      "\n"
      R"({"prompt": "a dog", "negative_prompt": "blurry"})"
      "\n\n"
      R"({"prompt": "empty negative", "negative_prompt": ""})"
      "\n"
      R"({"prompt": "no cfg", "negative_prompt": null})"
      "\n";
  GenerationDefaults d;
  d.seed = 100;
  auto jobs = jobs_of(text, "p.jsonl", d);
  ASSERT_EQ(jobs.size(), 4u);
  EXPECT_EQ(jobs[0].seed, 42u);
  EXPECT_EQ(jobs[0].width, 512);
  EXPECT_EQ(jobs[0].height, 256);
  EXPECT_EQ(jobs[0].steps, 20);
  EXPECT_FLOAT_EQ(jobs[0].cfg, 2.5f);
  EXPECT_EQ(jobs[0].file_stem, "cat");
  EXPECT_EQ(jobs[0].negative_prompt, " ");  // the default negative prompt: true CFG on
  EXPECT_TRUE(jobs[0].true_cfg);
  EXPECT_EQ(jobs[1].seed, 101u);  // --seed + index
  EXPECT_EQ(jobs[1].negative_prompt, "blurry");
  EXPECT_EQ(jobs[1].file_stem, "000001-a-dog");
  EXPECT_EQ(jobs[1].width, 1024);
  EXPECT_EQ(jobs[1].steps, 50);
  // diffusers: do_true_cfg = true_cfg_scale > 1 and negative_prompt is not None.
  EXPECT_TRUE(jobs[2].true_cfg);  // "" is a negative prompt
  EXPECT_EQ(jobs[2].negative_prompt, "");
  EXPECT_EQ(jobs[2].origin, "p.jsonl:4");
  EXPECT_FALSE(jobs[3].true_cfg);  // null is None: no negative prompt, no CFG
  EXPECT_EQ(jobs[3].negative_prompt_used(), "");
}

TEST(PromptFile, CfgOneTurnsCfgOffAndSizesAreFloored) {
  GenerationDefaults d;
  d.cfg = 1.0;
  d.width = 1000;
  d.height = 1023;
  auto jobs = jobs_of("x\n", "p.txt", d);
  EXPECT_FALSE(jobs[0].true_cfg);
  EXPECT_EQ(jobs[0].width, 992);
  EXPECT_EQ(jobs[0].height, 1008);
  EXPECT_EQ(jobs[0].grid_w(), 62);
  EXPECT_EQ(jobs[0].latent_h(), 126);
}

TEST(PromptFile, EveryMalformedCaseNamesFileLineAndField) {
  auto check = [](const std::string& text, const std::string& expected) {
    std::string msg = test::input_error_of([&] { jobs_of(text, "bad.jsonl"); });
    EXPECT_NE(msg.find(expected), std::string::npos) << "expected '" << expected << "' in: " << msg;
  };
  check("{\"prompt\": \"ok\"}\n{\"prompt\": \"x\", \"sede\": 1}\n", "bad.jsonl:2: unknown field \"sede\"");
  check("{\"prompt\": \"ok\"}\n{not json}\n", "bad.jsonl:2: not valid JSON");
  check("[\"a list\"]\n", "bad.jsonl:1: each line must be a JSON object");
  check("{\"negative_prompt\": \"x\"}\n", "bad.jsonl:1: missing \"prompt\"");
  check("{\"prompt\": 42}\n", "bad.jsonl:1: \"prompt\" must be a string, found 42");
  check("{\"prompt\": \"x\", \"seed\": -1}\n", "bad.jsonl:1: \"seed\" must be a non-negative integer, found -1");
  check("{\"prompt\": \"x\", \"seed\": 1.5}\n", "\"seed\" must be a non-negative integer");
  check("{\"prompt\": \"x\", \"width\": \"512\"}\n", "\"width\" must be an integer, found \"512\"");
  check("{\"prompt\": \"x\", \"cfg\": \"high\"}\n", "\"cfg\" must be a number");
  check("{\"prompt\": \"x\", \"width\": 0}\n", "bad.jsonl:1: width 0 is out of range");
  check("{\"prompt\": \"x\", \"height\": 100000}\n", "height 100000 is out of range");
  check("{\"prompt\": \"x\", \"steps\": 0}\n", "steps 0 is out of range");
  check("{\"prompt\": \"x\", \"steps\": 1}\n", "steps 1 is out of range");
  check("{\"prompt\": \"x\", \"cfg\": 0.5}\n", "cfg 0.5 is out of range");
  check("{\"prompt\": \"x\", \"name\": \"../escape\"}\n", "is not a plain file name");
  check("{\"prompt\": \"x\", \"name\": \"a\"}\n{\"prompt\": \"y\", \"name\": \"a\"}\n",
        "bad.jsonl:2: name \"a\" is already used by bad.jsonl:1");
  check(std::string("{\"prompt\": \"\xff\"}\n"), "bad.jsonl:1: not valid UTF-8");
  // well-formed in shape, not in value: a UTF-16 surrogate, an overlong '/', past U+10FFFF
  check(std::string("{\"prompt\": \"ok\"}\n{\"prompt\": \"\xed\xa0\x80\"}\n"), "bad.jsonl:2: not valid UTF-8");
  check(std::string("{\"prompt\": \"\xc0\xaf\"}\n"), "bad.jsonl:1: not valid UTF-8");
  check(std::string("{\"prompt\": \"\xf5\x80\x80\x80\"}\n"), "bad.jsonl:1: not valid UTF-8");
  EXPECT_NE(test::input_error_of([] { parse_prompt_text("x", "prompts.csv"); }).find("unknown prompt file type"), std::string::npos);
}

// A value from the command line is checked once under its option's name, not blamed on the
// first prompt line that did not set it; a line's own value still names the line.
TEST(PromptFile, CommandLineValuesAreCheckedUnderTheirOptionsName) {
  auto error = [](GenerationDefaults d) { return test::input_error_of([&] { jobs_of("a\nb\n", "p.txt", d); }); };
  GenerationDefaults d;
  d.steps = 1;
  EXPECT_NE(error(d).find("--steps: steps 1 is out of range"), std::string::npos) << error(d);
  d = {};
  d.cfg = 0.5;
  EXPECT_NE(error(d).find("--cfg: cfg 0.5 is out of range"), std::string::npos) << error(d);
  d = {};
  d.width = 8;
  EXPECT_NE(error(d).find("--width: width 8 is out of range"), std::string::npos) << error(d);
  // seed + index past 2^64 - 1 would wrap to seed 0: image 1 here
  d = {};
  d.seed = std::numeric_limits<uint64_t>::max();
  EXPECT_NE(error(d).find("p.txt:2: --seed 18446744073709551615 + index 1 is past the largest seed"), std::string::npos)
      << error(d);
  d.seed = std::numeric_limits<uint64_t>::max() - 1;
  EXPECT_EQ(jobs_of("a\nb\n", "p.txt", d)[1].seed, std::numeric_limits<uint64_t>::max());
  // A line's own seed is its own: no wrap to check.
  EXPECT_EQ(jobs_of("{\"prompt\": \"a\"}\n{\"prompt\": \"b\", \"seed\": 3}\n", "p.jsonl", d)[1].seed, 3u);
}

TEST(PromptFile, Slugs) {
  EXPECT_EQ(slugify("A red fox, jumping!"), "a-red-fox-jumping");
  EXPECT_EQ(slugify("東京の夜景"), "image");
  EXPECT_EQ(slugify("  --x--  "), "x");
  EXPECT_EQ(slugify(std::string(100, 'a')).size(), 48u);
}

// "image": a path or a list, each resolved from the prompt file's folder unless absolute; the
// jobs carry them (and through the JSON every rank receives).
TEST(PromptFile, ImagePathsAreTakenFromThePromptFilesFolder) {
  const auto entries = parse_prompt_text(
      "{\"prompt\": \"relight\", \"image\": \"photos/a.png\"}\n"
      "{\"prompt\": \"merge\", \"image\": [\"b.jpg\", \"/abs/c.webp\"]}\n"
      "{\"prompt\": \"none\"}\n",
      "/data/set/prompts.jsonl");
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].images, (std::vector<std::string>{"photos/a.png"}));
  EXPECT_EQ(entries[0].image_files, (std::vector<std::string>{"/data/set/photos/a.png"}));
  EXPECT_EQ(entries[1].image_files, (std::vector<std::string>{"/data/set/b.jpg", "/abs/c.webp"}));
  EXPECT_TRUE(entries[2].images.empty());
  EXPECT_EQ(parse_prompt_text("{\"prompt\": \"x\", \"image\": \"a.png\"}\n", "p.jsonl")[0].image_files[0], "a.png");
  EXPECT_EQ(parse_prompt_text("{\"prompt\": \"x\", \"image\": \"a.png\"}\n", "/p.jsonl")[0].image_files[0], "/a.png");

  GenerationDefaults d;
  d.width = d.height = 64;
  auto jobs = resolve_jobs(entries, d, Log::quiet());
  ASSERT_EQ(jobs[1].images.size(), 2u);
  jobs[1].images[1].sha256 = "ab12";
  jobs[1].images[1].width = 7;
  jobs[1].images[1].height = 9;
  const auto back = jobs_from_json(jobs_to_json(jobs));
  EXPECT_EQ(back[1].images, jobs[1].images);
  EXPECT_EQ(back[0].images[0].path, "photos/a.png");
  EXPECT_TRUE(back[2].images.empty());

  auto check = [](const std::string& text, const std::string& expected) {
    std::string msg = test::input_error_of([&] { parse_prompt_text(text, "bad.jsonl"); });
    EXPECT_NE(msg.find(expected), std::string::npos) << "expected '" << expected << "' in: " << msg;
  };
  check("{\"prompt\": \"x\", \"image\": []}\n", "bad.jsonl:1: \"image\" is an empty list");
  check("{\"prompt\": \"x\", \"image\": 3}\n", "bad.jsonl:1: \"image\" must be a path or a list of paths");
  check("{\"prompt\": \"x\", \"image\": [\"a.png\", \"\"]}\n", "bad.jsonl:1: \"image\" must be a path");
  check("{\"prompt\": \"x\", \"image\": \"a\\u0000b.png\"}\n", "bad.jsonl:1: \"image\" path holds a NUL");
}

