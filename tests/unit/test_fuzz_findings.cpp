// Inputs the fuzz targets (tests/fuzz) found to crash, hang, exhaust memory or raise the wrong
// error, each kept here as a regression test with its input: the product must now refuse it
// with an InputError naming what is wrong, or accept it as the line of thought says.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "core/sha256.h"
#include "io/manifest.h"
#include "pipeline/job.h"
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
