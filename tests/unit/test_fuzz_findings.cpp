// Inputs the fuzz targets (tests/fuzz) found to crash, hang, exhaust memory or raise the wrong
// error, each kept here as a regression test with its input: the product must now refuse it
// with an InputError naming what is wrong, or accept it as the line of thought says.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <map>
#include <tuple>

#include "app/commands.h"
#include "core/error.h"
#include "core/sha256.h"
#include "io/config.h"
#include "convert/convert.h"
#include "io/manifest.h"
#include "io/safetensors.h"
#include "model/scheduler.h"
#include "model/text_encoder.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "model/vae.h"
#include "pipeline/job.h"
#include "pipeline/resume.h"
#include "pipeline/runner.h"
#include "test_util.h"

using namespace ditbatch;

namespace {

ImageJob fox_job() {
  PromptEntry entry;
  entry.prompt = "A red fox in the snow";
  entry.origin = "prompts.txt:1";
  GenerationDefaults defaults;
  defaults.width = defaults.height = 64;
  defaults.steps = 2;
  return resolve_jobs({entry}, defaults, Log::quiet()).at(0);
}

}  // namespace

// fuzz_manifest: a manifest line whose fields resume reads have another JSON type ("status": 5,
// "file": [], "max_sequence_length": "512" or 1e300) ended the rerun with nlohmann's
// type_error, or converted 1e300 to an integer (undefined behaviour). Such a line is not one
// ditbatch wrote: the field counts as not recorded, exactly as if the line lacked it.
TEST(FuzzFindings, ManifestFieldsOfAnotherTypeCountAsNotRecorded) {
  test::TempDir out;
  const ImageJob job = fox_job();
  test::write_text(out / (job.file_stem + ".png"), "the image");
  const ResumeKey key{"abc123", 512, false};
  const nlohmann::json good = {{"index", 0},
                               {"status", "ok"},
                               {"file", job.file_stem + ".png"},
                               {"sha256", sha256_hex("the image")},
                               {"prompt", job.prompt},
                               {"negative_prompt", job.negative_prompt},
                               {"seed", job.seed},
                               {"width", job.width},
                               {"height", job.height},
                               {"steps", job.steps},
                               {"cfg", job.cfg},
                               {"model_checksum", "abc123"},
                               {"max_sequence_length", 256},
                               {"prompt_tokens", 300}};
  // What resume makes of a manifest holding `line`: is the image complete, is the rerun refused.
  auto resume = [&](const nlohmann::json& line) {
    test::write_text(out / "manifest.jsonl", line.dump() + "\n");
    const bool complete = image_is_complete(out.path(), job, key, read_manifest(out.path()));
    bool refused = false;
    try {
      check_previous_images(out.path(), {job}, key);
    } catch (const InputError&) {
      refused = true;
    }
    return std::make_pair(complete, refused);
  };
  // The well-formed line: made with a token limit of 256 that cut its 300 tokens, so this run's
  // 512 makes another image: not complete, and the rerun is refused (it names the setting).
  ASSERT_EQ(resume(good), std::make_pair(false, true));
  nlohmann::json same_limit = good;
  same_limit["max_sequence_length"] = 512;
  ASSERT_EQ(resume(same_limit), std::make_pair(true, false)) << "the line must count, or the cases below prove nothing";

  const std::vector<std::pair<std::string, nlohmann::json>> odd = {{"status", 5},
                                                                   {"file", nlohmann::json::array()},
                                                                   {"sha256", nullptr},
                                                                   {"model_checksum", 1},
                                                                   {"max_sequence_length", "512"},
                                                                   {"max_sequence_length", 1e300},
                                                                   {"prompt_tokens", 1e300},
                                                                   {"prompt_tokens", -2.5}};
  for (const nlohmann::json& base : {good, same_limit})
    for (const auto& [field, value] : odd) {
      nlohmann::json line = base, without = base;
      line[field] = value;
      without.erase(field);
      SCOPED_TRACE(line.dump());
      std::pair<bool, bool> got, expected = resume(without);
      EXPECT_NO_THROW(got = resume(line));
      EXPECT_EQ(got, expected) << field << " = " << value.dump() << " is not read as a line without " << field;
    }
}

namespace {

// The message of the InputError `f` throws ("" and a test failure if it throws none).
template <typename F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError";
  return "";
}

const std::string kTiny = std::string(DITBATCH_TEST_DATA) + "/golden/tiny-pipeline";

// The tiny pipeline's config.json of `component` with `changes` applied.
std::string config_with(const std::string& component, const nlohmann::json& changes) {
  nlohmann::json config = nlohmann::json::parse(test::read_text(kTiny + "/" + component + "/config.json"));
  config.merge_patch(changes);
  return config.dump();
}

}  // namespace

// fuzz_model_config_*: sizes from config.json multiplied past int64 (num_attention_heads 2^62 x
// attention_head_dim: undefined behaviour), or layer counts that made the tensor list itself
// exhaust memory (num_layers 10^9, num_res_blocks 10^8) before any tensor was compared. Each
// size is now bounded, and the refusal names the key, the value and the range, before the
// model's tensor list is made (convert's check, and generate's config validation alike).
TEST(FuzzFindings, ModelConfigSizesAreBoundedBeforeTheTensorListIsMade) {
  struct Case {
    std::string component;
    nlohmann::json changes;
    std::string expected;  // in the message
  };
  const std::vector<Case> cases = {
      {"transformer", {{"num_layers", 1000000000}}, "'num_layers' = 1000000000 is out of range (expected 1..1024)"},
      {"transformer",
       {{"num_attention_heads", int64_t{1} << 62}},
       "'num_attention_heads' = 4611686018427387904 is out"},
      {"transformer", {{"num_attention_heads", 65536}, {"attention_head_dim", 32}}, "num_attention_heads 65536 x"},
      {"transformer", {{"out_channels", 9223372036854775807}}, "'out_channels' = 9223372036854775807 is out"},
      {"transformer", {{"axes_dims_rope", {2, 2, 4611686018427387904}}}, "axes_dims_rope entries"},
      {"vae", {{"num_res_blocks", 100000000}}, "'num_res_blocks' = 100000000 is out of range (expected 0..1024)"},
      {"vae", {{"base_dim", int64_t{1} << 62}}, "'base_dim' = 4611686018427387904 is out"},
      {"vae", {{"dim_mult", {1, 2, 4, 4611686018427387904}}}, "dim_mult [1, 2, 4, 4611686018427387904] x base_dim 8"},
      {"text_encoder",
       {{"text_config", {{"vocab_size", 18446744073709551615u}}}},
       "vocab_size' = 18446744073709551615"},
      {"text_encoder", {{"text_config", {{"num_hidden_layers", 100000000}}}}, "num_hidden_layers' = 100000000 is out"},
      {"text_encoder", {{"text_config", {{"head_dim", 1048576}}}}, "num_attention_heads 4 x head_dim 1048576"},
  };
  const std::map<std::string, std::string> files = {{"transformer", "diffusion_pytorch_model.safetensors"},
                                                    {"vae", "diffusion_pytorch_model.safetensors"},
                                                    {"text_encoder", "model.safetensors"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.component + " " + c.changes.dump());
    const SafetensorsSet tensors = SafetensorsSet::open_file(kTiny + "/" + c.component + "/" + files.at(c.component));
    const std::string config = config_with(c.component, c.changes);
    // convert's check, then what generate validates a weight file's config_json with.
    const std::string message =
        refusal([&] { check_component_tensors(c.component, "config.json", config, tensors, kTiny); });
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    const Config parsed = Config::parse(config, "w.h5:/" + c.component);
    const std::string again = refusal([&] {
      if (c.component == "transformer") TransformerConfig::from(parsed);
      if (c.component == "vae") VaeConfig::from(parsed);
      if (c.component == "text_encoder") TextEncoderConfig::from(parsed);
    });
    EXPECT_NE(again.find(c.expected), std::string::npos) << again;
  }
  // The unchanged configs still pass both (the bounds are far past the real model's sizes).
  for (const auto& [component, file] : files)
    EXPECT_NO_THROW(check_component_tensors(component, "config.json", config_with(component, nlohmann::json::object()),
                                            SafetensorsSet::open_file(kTiny + "/" + component + "/" + file), kTiny))
        << component;
}

// fuzz_tokenizer: a vocabulary id of 2^31 - 1 sized the id -> token table to 2^31 entries (32 GB,
// std::bad_alloc or the OOM killer). Ids now stop at 2^24 - 1, named in the refusal.
TEST(FuzzFindings, ATokenIdPastTheBoundIsRefusedNotAllocated) {
  const std::string tok = kTiny + "/tokenizer";
  nlohmann::json vocab = nlohmann::json::parse(test::read_text(tok + "/vocab.json"));
  vocab["<|gap|>"] = 2147483647;
  const TokenizerFiles files = {{"vocab.json", vocab.dump()}, {"merges.txt", test::read_text(tok + "/merges.txt")}};
  const std::string message = refusal([&] { Tokenizer::from_files(files, "fuzz/tokenizer"); });
  EXPECT_NE(message.find("fuzz/tokenizer/vocab.json: token \"<|gap|>\" has id 2147483647, expected an integer in "
                         "0..16777215"),
            std::string::npos)
      << message;
  // An id past the vocabulary's own but inside the bound still loads, and changes no other id
  // (a special symbol: any other symbol no merge makes is refused as a cut merges list).
  vocab["<|gap|>"] = 300000;
  const std::string& merges = files.at("merges.txt");
  Tokenizer with_gap = Tokenizer::from_files({{"vocab.json", vocab.dump()}, {"merges.txt", merges}}, "with a gap");
  Tokenizer tiny =
      Tokenizer::from_files({{"vocab.json", test::read_text(tok + "/vocab.json")}, {"merges.txt", merges}}, "tiny");
  EXPECT_EQ(with_gap.vocab_size(), 300001);
  EXPECT_EQ(with_gap.token_id("<|gap|>"), 300000);
  EXPECT_EQ(with_gap.encode("A red fox jumps."), tiny.encode("A red fox jumps."));
}

// fuzz_tokenize: a stdin line 1e708 (a JSON number past a double) raised nlohmann's
// out_of_range, not its parse_error, and escaped `ditbatch tokenize` as a run-time failure. It
// is refused as any other line that is not a prompt, with its line number.
TEST(FuzzFindings, ANumberPastADoubleOnTokenizeStdinIsRefusedWithItsLine) {
  Tokenizer tokenizer = Tokenizer::from_folder(kTiny + "/tokenizer");
  for (const std::string line : {"1e708\n", "{\"prompt\": \"a fox\", \"seed\": -1e400}\n"}) {
    const std::string message = refusal([&] { tokenize_stdin_line(tokenizer, nullptr, false, line, 7); });
    EXPECT_NE(message.find("stdin line 7: not a JSON string"), std::string::npos) << message;
    EXPECT_NE(message.find("number overflow"), std::string::npos) << message;
  }
  // The same line with a number a double holds is read as before: the prompt's ids.
  EXPECT_EQ(tokenize_stdin_line(tokenizer, nullptr, false, "{\"prompt\": \"a fox\", \"seed\": 1e300}\n", 8),
            tokenize_stdin_line(tokenizer, nullptr, false, "\"a fox\"\n", 9));
}

// fuzz_scheduler_config: base_image_seq_len -2^63 made calculate_shift's int64 difference
// overflow (undefined behaviour). The difference is now exact, then rounded once to a double,
// as Python computes (max_seq_len - base_seq_len) with its unbounded ints.
TEST(FuzzFindings, CalculateShiftTakesTheExactDifferenceOfAnyTwoInt64) {
  const int64_t base = std::numeric_limits<int64_t>::min(), max = 9;
  const double m = (0.9 - 0.5) / 9223372036854775817.0;  // 9 + 2^63, rounded once: Python's float(9 - base)
  const double b = 0.5 - m * static_cast<double>(base);
  EXPECT_EQ(calculate_shift(256, base, max, 0.5, 0.9), 256.0 * m + b);
  // The usual numbers are unchanged: the tiny pipeline's config at 1024x1024 (4096 image tokens).
  EXPECT_EQ(calculate_shift(4096, 256, 8192, 0.5, 0.9), 4096.0 * (0.4 / 7936.0) + (0.5 - (0.4 / 7936.0) * 256.0));
}

// A manifest line whose "scheduler" is no text, or whose "loras" entries are not the objects
// ditbatch writes, ended the rerun with nlohmann's type_error (exit 2 naming nothing). Such a
// recorded setting is another one: the rerun is refused, naming it, as for any changed setting.
TEST(FuzzFindings, ASchedulerOrLorasOfAnotherShapeIsAnotherSetting) {
  test::TempDir out;
  const ImageJob job = fox_job();
  test::write_text(out / (job.file_stem + ".png"), "the image");
  const ResumeKey key{"abc123", 512, false};
  const nlohmann::json line = {{"index", 0},           {"status", "ok"},           {"file", job.file_stem + ".png"},
                               {"sha256", sha256_hex("the image")}, {"prompt", job.prompt},
                               {"negative_prompt", job.negative_prompt}, {"seed", job.seed}, {"width", job.width},
                               {"height", job.height}, {"steps", job.steps}, {"cfg", job.cfg},
                               {"model_checksum", "abc123"}};
  test::write_text(out / "manifest.jsonl", line.dump() + "\n");
  ASSERT_TRUE(image_is_complete(out.path(), job, key, read_manifest(out.path()))) << "the line must count";
  for (const auto& [field, value, shown] : std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"scheduler", 5, "scheduler 5, now"},
           {"scheduler", nlohmann::json::array(), "scheduler [], now"},
           {"loras", nlohmann::json::array({5}), "loras [5], now none"},
           {"loras", nlohmann::json::parse(R"([{"sha256": 7, "strength": "x", "file": 1}])"), "loras [{\"file\":1"}}) {
    nlohmann::json odd = line;
    odd[field] = value;
    test::write_text(out / "manifest.jsonl", odd.dump() + "\n");
    SCOPED_TRACE(odd.dump());
    bool complete = true;
    EXPECT_NO_THROW(complete = image_is_complete(out.path(), job, key, read_manifest(out.path())));
    EXPECT_FALSE(complete);
    const std::string message = refusal([&] { check_previous_images(out.path(), {job}, key); });
    EXPECT_NE(message.find(shown), std::string::npos) << message;
  }
}
