// JSON nested 100,000 levels deep once crashed every parser of outside bytes (exit 139, nothing
// printed): nlohmann's parser and the values it builds recurse once per level. Each parser now
// refuses more than kMaxJsonDepth levels first, naming the file, the line and the key, and the
// error never echoes the value back.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/h5.h"
#include "io/json_text.h"
#include "io/manifest.h"
#include "io/prompt_file.h"
#include "test_util.h"
#include "tiny_model.h"

using namespace ditbatch;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

constexpr size_t kDeep = 100000;
std::string nested(size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); }
bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A refusal as the user sees it: exit 2, one short error naming where, nothing echoed at length.
void expect_refused(const test::CommandResult& r, const std::string& where) {
  EXPECT_EQ(r.status, 2) << r.output.substr(0, 2000);
  EXPECT_TRUE(has(r.output, where)) << r.output.substr(0, 2000);
  EXPECT_TRUE(has(r.output, "nested deeper than 64 levels")) << r.output.substr(0, 2000);
  EXPECT_LT(r.output.size(), 2000u) << "the error echoes the value back";
}

}  // namespace

TEST(DeepJson, TheLimitCountsBracketsOutsideStringsAndSaysWhere) {
  EXPECT_FALSE(find_json_too_deep(nested(64)));
  const auto at_65 = find_json_too_deep(nested(65));
  ASSERT_TRUE(at_65);
  EXPECT_EQ(at_65->byte, 64u);
  EXPECT_EQ(at_65->column, 64u);
  EXPECT_EQ(at_65->key, "");
  // Brackets inside strings, escaped quotes among them, are text.
  EXPECT_FALSE(find_json_too_deep("{\"a\": \"" + std::string(1000, '[') + "\\\"[{\", \"b\": [[1]]}"));
  // Objects count as arrays do; the key is the top-level one the value is under.
  const std::string objects = "{\"seed\": 1,\n \"prompt\": " + std::string(70, '{') + "}";
  const auto in_objects = find_json_too_deep(objects);
  ASSERT_TRUE(in_objects);
  EXPECT_EQ(in_objects->line, 1u);
  EXPECT_EQ(in_objects->column, 11u + 63u);  // ` "prompt": ` then the 64th brace of the value
  EXPECT_EQ(in_objects->key, "prompt");

  try {
    parse_json("{\"seed\": 1,\n \"prompt\": " + nested(kDeep) + "}");
    ADD_FAILURE() << "parsed";
  } catch (const nlohmann::json::parse_error& e) {
    EXPECT_STREQ(e.what(), "[json.exception.parse_error.101] parse error at line 2, column 75: nested deeper than 64 "
                           "levels under key \"prompt\"");
  }
  EXPECT_TRUE(parse_json(nested(kDeep), nullptr, /*allow_exceptions=*/false).is_discarded());
  EXPECT_EQ(parse_json(nested(64)).dump().size(), 128u);  // the limit itself parses
}

TEST(DeepJson, ValuesInErrorsAreCutAtACharacter) {
  EXPECT_EQ(json_excerpt(nlohmann::json("short")), "\"short\"");
  const std::string long_text = "\"" + std::string(10, 'a') + "\xc3\xa9" + std::string(1000, 'b') + "\"";
  EXPECT_EQ(text_excerpt(long_text, 12), "\"aaaaaaaaaa... (1014 bytes)");  // not inside the é
  EXPECT_EQ(json_excerpt(nlohmann::json(std::string(5000, 'x'))).size(), 80u + std::string("... (5002 bytes)").size());
  // Invalid UTF-8 in a value is shown, not thrown on.
  EXPECT_EQ(json_excerpt(nlohmann::json(std::string("a\xff"))), "\"a\xef\xbf\xbd\"");
}

TEST(DeepJson, PromptFilesAndStdinRefuseDeepValuesByLine) {
  TempDir dir;
  const std::string prompts = dir / "p.jsonl";
  test::write_text(prompts, "{\"prompt\": \"a fox\"}\n{\"seed\": 1, \"prompt\": " + nested(kDeep) + "}\n");
  expect_refused(test::run(fmt::format("{} generate --weights {} --prompts {} --out {}", test::exe(), test::tiny_model(),
                                       prompts, dir / "out")),
                 prompts + ":2: not valid JSON: [json.exception.parse_error.101] parse error at line 1, column 86: "
                           "nested deeper than 64 levels under key \"prompt\"");
  EXPECT_FALSE(fs::exists(dir / "out"));
  // 10,000 levels (once echoed back whole) and a value too deep inside an object inside a string field.
  test::write_text(prompts, "{\"prompt\": \"a\", \"loras\": " + nested(10000) + "}\n");
  expect_refused(test::run(fmt::format("{} generate --weights {} --prompts {} --out {}", test::exe(), test::tiny_model(),
                                       prompts, dir / "out")),
                 prompts + ":1: ");
  test::write_text(dir / "stdin.txt", "\"a fox\"\n" + nested(kDeep) + "\n");
  expect_refused(test::run(fmt::format("{} tokenize --tokenizer {} < {}", test::exe(), test::golden("tiny-pipeline/tokenizer"),
                                       dir / "stdin.txt")),
                 "stdin line 2: ");
}

TEST(DeepJson, ConfigsOfEveryKindRefuseDeepValuesByFile) {
  TempDir dir;
  // --scheduler-config
  const std::string scheduler = dir / "scheduler.json";
  test::write_text(scheduler, "{\"shift\": " + nested(kDeep) + "}");
  expect_refused(test::run(fmt::format("{} generate --weights {} --prompt x --scheduler-config {} --out {}", test::exe(),
                                       test::tiny_model(), scheduler, dir / "out")),
                 scheduler + ": ");
  // A diffusers folder: a component's config.json, the scheduler's, the tokenizer's files.
  for (const std::string file : {"transformer/config.json", "scheduler/scheduler_config.json", "model_index.json",
                                 "tokenizer/tokenizer_config.json", "tokenizer/vocab.json"}) {
    SCOPED_TRACE(file);
    fs::remove_all(dir / "pipe");
    fs::copy(test::golden("tiny-pipeline"), dir / "pipe", fs::copy_options::recursive);
    test::write_text((dir / "pipe") + "/" + file, "{\"num_layers\": " + nested(kDeep) + "}");
    expect_refused(test::run(fmt::format("{} convert --from {} --to {}", test::exe(), dir / "pipe", dir / "c.h5")),
                   file);
    EXPECT_FALSE(fs::exists(dir / "c.h5"));
  }
  // A weight file whose stored config was edited in place to nest deep: generate and inspect
  // refuse it without crashing, and the writer refuses to write such a config.
  const std::string edited = dir / "edited.h5";
  fs::copy_file(test::tiny_model(), edited);
  h5::File::open_rw(edited).root().open_group("transformer").set_attr("config_json",
                                                                      "{\"num_layers\": " + nested(kDeep) + "}");
  // (Its checksum no longer matches: that refusal comes first, short, naming the file.)
  const auto generate = test::run(fmt::format("{} generate --weights {} --prompt x --out {}", test::exe(), edited, dir / "out"));
  EXPECT_EQ(generate.status, 2) << generate.output.substr(0, 2000);
  EXPECT_TRUE(has(generate.output, edited + ": ")) << generate.output.substr(0, 2000);
  EXPECT_LT(generate.output.size(), 2000u);
  EXPECT_TRUE(has(test::input_error_of([&] {
                    test::rewrite_weights(test::tiny_model(), dir / "rewritten.h5",
                                          {.config = [](const std::string& component, std::string& config) {
                                            if (component == "transformer") config = "[" + nested(kDeep) + "]";
                                          }});
                  }),
                  "nested deeper than 64 levels"));
  const auto inspect = test::run(fmt::format("{} inspect {}", test::exe(), edited));
  EXPECT_NE(inspect.status, 139) << inspect.output.substr(0, 2000);
  EXPECT_LT(inspect.output.size(), 20000u);
}

TEST(DeepJson, LoraHeadersAndMetadataRefuseDeepValues) {
  TempDir dir;
  // The safetensors header itself.
  const std::string header = "{\"__metadata__\": {\"x\": " + nested(kDeep) + "}}";
  const uint64_t n = header.size();
  test::write_text(dir / "deep-header.safetensors", std::string(reinterpret_cast<const char*>(&n), 8) + header);
  expect_refused(test::run(fmt::format("{} generate --weights {} --prompt x --lora {} --out {}", test::exe(),
                                       test::tiny_model(), dir / "deep-header.safetensors", dir / "out")),
                 dir / "deep-header.safetensors");
  // PEFT's LoraConfig in the metadata (a string of JSON inside the header's JSON).
  const test::StTensor down{"transformer.transformer_blocks.0.attn.to_q.lora_A.weight", "F32", {1, 8},
                            test::f32_bytes(std::vector<float>(8, 0.5f))};
  nlohmann::json metadata = {{"lora_adapter_metadata", "{\"r\": 1, \"rank_pattern\": " + nested(kDeep) + "}"}};
  test::write_text(dir / "deep-metadata.safetensors", test::safetensors_bytes({down}, metadata));
  expect_refused(test::run(fmt::format("{} generate --weights {} --prompt x --lora {} --out {}", test::exe(),
                                       test::tiny_model(), dir / "deep-metadata.safetensors", dir / "out")),
                 dir / "deep-metadata.safetensors");
}

TEST(DeepJson, OutputFoldersWithDeepLinesAreReadWithoutCrashing) {
  TempDir dir;
  const std::string out = dir / "out";
  auto made = test::run(fmt::format("{} generate --weights {} --prompt 'a fox' --width 32 --height 32 --steps 2 --out {}",
                                    test::exe(), test::tiny_model(), out));
  ASSERT_EQ(made.status, 0) << made.output;
  // A deep line appended to the manifest, and a deep run record planted beside the real ones.
  {
    std::ofstream(out + "/manifest.jsonl", std::ios::app) << "{\"index\": 1, \"file\": " << nested(kDeep) << "}\n";
  }
  test::write_text(out + "/.runs/zz-planted.json", "{\"ranks\": " + nested(kDeep) + "}");
  for (const std::string command : {"verify", "inspect", "report"}) {
    SCOPED_TRACE(command);
    const auto r = test::run(fmt::format("{} {} {}", test::exe(), command, out));
    EXPECT_NE(r.status, 139) << r.output.substr(0, 2000);
    EXPECT_NE(r.status, 134) << r.output.substr(0, 2000);
    EXPECT_LT(r.output.size(), 20000u);
  }
  // A resume over the folder still keeps the real image and makes nothing twice.
  const auto again = test::run(fmt::format("{} generate --weights {} --prompt 'a fox' --width 32 --height 32 --steps 2 --out {}",
                                           test::exe(), test::tiny_model(), out));
  EXPECT_NE(again.status, 139) << again.output.substr(0, 2000);
  EXPECT_LT(again.output.size(), 20000u);
}
