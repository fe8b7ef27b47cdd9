// What resume makes of manifest lines of every shape, now that a rerun reads its lines with a
// quick parser (ManifestFieldParser) and the full one only where that cannot say. Each verdict
// below is the documented one (io/manifest.h, pipeline/runner.h, pipeline/output_check.h), and
// the full parser's path (read_manifest + image_is_complete) must give the same.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "core/sha256.h"
#include "io/manifest.h"
#include "io/manifest_fields.h"
#include "io/png_io.h"
#include "io/tar_archive.h"
#include "pipeline/image_outputs.h"
#include "pipeline/resume.h"
#include "pipeline/runner.h"
#include "test_util.h"

using namespace ditbatch;
using test::TempDir;

namespace {

// A manifest line as raw JSON text, field by field in order: a key can be given twice.
struct Line {
  std::vector<std::pair<std::string, std::string>> fields;
  Line& set(const std::string& key, const std::string& raw) {
    for (auto& [k, v] : fields)
      if (k == key) return v = raw, *this;
    return add(key, raw);
  }
  Line& add(const std::string& key, const std::string& raw) {
    fields.emplace_back(key, raw);
    return *this;
  }
  Line& drop(const std::string& key) {
    std::erase_if(fields, [&](const auto& f) { return f.first == key; });
    return *this;
  }
  std::string text() const {
    std::string t = "{";
    for (const auto& [k, v] : fields) t += (t.size() > 1 ? "," : "") + ("\"" + k + "\":" + v);
    return t + "}";
  }
};

std::string stat_json(const FileStat& st, const std::string& size_raw) {
  return fmt::format("{{\"size\":{},\"mtime_ns\":{},\"inode\":{},\"device\":{}}}", size_raw, st.mtime_ns, st.inode,
                     st.device);
}

class ManifestFieldsTest : public ::testing::Test {
 protected:
  static PromptEntry prompt_entry() {
    PromptEntry e;
    e.prompt = "caf\xC3\xA9 au lait \xF0\x9F\xA6\x8A";  // "café au lait 🦊"
    e.origin = "test";
    return e;
  }
  static GenerationDefaults defaults() {
    GenerationDefaults d;
    d.width = d.height = 64;
    d.steps = 2;
    d.seed = 7;
    return d;
  }
  void SetUp() override {
    jobs = resolve_jobs({prompt_entry()}, defaults(), Log::quiet());
    key.model_checksum = "5e1f0c2d9a8b7c6d5e4f3a2b1c0d9e8f";
    key.max_sequence_length = 512;
    key.denoiser.scheduler = key.denoiser.model_scheduler = "FlowMatchEulerDiscreteScheduler(shift=3)";
    const ImageJob& job = jobs[0];
    png = out / (job.file_stem + ".png");
    std::vector<uint8_t> rgb(64 * 64 * 3);
    for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 37 + 11);
    write_png_atomic(png, rgb.data(), 64, 64, 3, {});
    stat = *stat_regular_file(png);
    sha256 = sha256_file(png);
    // The line as ditbatch writes it (cfg from a float, seed unsigned, tokens and timings).
    base.set("index", "0")
        .set("prompt", nlohmann::json(job.prompt).dump())
        .set("negative_prompt", "\" \"")
        .set("seed", "7")
        .set("width", "64")
        .set("height", "64")
        .set("steps", "2")
        .set("cfg", "4.0")
        .set("true_cfg", "true")
        .set("file", nlohmann::json(job.file_stem + ".png").dump())
        .set("run_id", "\"run1-1\"")
        .set("max_sequence_length", "512")
        .set("prompt_tokens", "9")
        .set("negative_prompt_tokens", "1")
        .set("timings", "{\"text_encoder_s\":0.1,\"total_s\":[1,{\"a\":null}]}")
        .set("file_stat", stat_json(stat, std::to_string(stat.size)))
        .set("sha256", "\"" + sha256 + "\"")
        .set("status", "\"ok\"")
        .set("model_checksum", "\"" + key.model_checksum + "\"")
        .set("loras", "[]")
        .set("scheduler", "\"" + key.denoiser.scheduler + "\"");
  }

  // The state the quick scan gives image 0 with `text` as the whole manifest.jsonl, checked
  // against the full parser's path (complete or not), and whether a rerun is refused.
  PreviousImages::State scan(const std::string& text) {
    test::write_text(out / "manifest.jsonl", text);
    const PreviousImages previous = scan_previous_images(out.path(), jobs, key);
    const bool reference = image_is_complete(out.path(), jobs[0], key, read_manifest(out.path()));
    EXPECT_EQ(previous.state[0] == PreviousImages::Complete, reference) << text;
    return static_cast<PreviousImages::State>(previous.state[0]);
  }
  std::string refusal(const std::string& text) {
    test::write_text(out / "manifest.jsonl", text);
    try {
      check_previous_images(out.path(), jobs, key);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }

  TempDir out;
  std::vector<ImageJob> jobs;
  ResumeKey key;
  std::string png, sha256;
  FileStat stat;
  Line base;
};

}  // namespace

TEST_F(ManifestFieldsTest, TheLineDitbatchWritesIsCompleteWithoutAHash) {
  EXPECT_EQ(scan(base.text() + "\n"), PreviousImages::Complete);
  // Trusted by its stat: a sha256 that is not the file's does not matter while the stat matches.
  EXPECT_EQ(scan(Line(base).set("sha256", "\"00\"").text() + "\n"), PreviousImages::Complete);
  // Spaces, tabs and a CRLF ending are JSON's whitespace.
  std::string spaced = base.text();
  spaced.insert(1, " \t");
  EXPECT_EQ(scan(spaced + " \r\n"), PreviousImages::Complete);
}

TEST_F(ManifestFieldsTest, NumbersCompareByValueAsJsonDoes) {
  EXPECT_EQ(scan(Line(base).set("steps", "2.0").text() + "\n"), PreviousImages::Complete);
  EXPECT_EQ(scan(Line(base).set("width", "6.4e1").text() + "\n"), PreviousImages::Complete);
  EXPECT_EQ(scan(Line(base).set("cfg", "4").text() + "\n"), PreviousImages::Complete);
  EXPECT_EQ(scan(Line(base).set("cfg", "4e0").text() + "\n"), PreviousImages::Complete);
  // 2^64 is no seed of 64 bits: a float, not 7 nor 0.
  EXPECT_EQ(scan(Line(base).set("seed", "18446744073709551616").text() + "\n"), PreviousImages::OtherSettings);
  EXPECT_EQ(scan(Line(base).set("steps", "3").text() + "\n"), PreviousImages::OtherSettings);
  EXPECT_NE(refusal(Line(base).set("steps", "3").text() + "\n").find("steps 3, now 2"), std::string::npos);
}

TEST_F(ManifestFieldsTest, UnicodeEscapesInThePromptAreTheCharacters) {
  // "café au lait 🦊" with é as \u00e9 and the fox as its UTF-16 surrogate pair.
  EXPECT_EQ(scan(Line(base).set("prompt", "\"caf\\u00e9 au lait \\ud83e\\udd8a\"").text() + "\n"),
            PreviousImages::Complete);
  EXPECT_EQ(scan(Line(base).set("prompt", "\"caf\\u00e8 au lait \\ud83e\\udd8a\"").text() + "\n"),
            PreviousImages::OtherSettings);
  // A lone surrogate is no JSON string nlohmann accepts: the line is not read at all.
  EXPECT_EQ(scan(Line(base).set("run_id", "\"\\ud800\"").text() + "\n"), PreviousImages::Absent);
  EXPECT_EQ(scan(Line(base).set("run_id", "\"\\udc00x\"").text() + "\n"), PreviousImages::Absent);
  // Nor are bytes that are not UTF-8, nor a control character, in a field resume never reads.
  EXPECT_EQ(scan(Line(base).set("run_id", "\"\xff\"").text() + "\n"), PreviousImages::Absent);
  EXPECT_EQ(scan(Line(base).set("run_id", "\"a\tb\"").text() + "\n"), PreviousImages::Absent);
}

TEST_F(ManifestFieldsTest, AKeyGivenTwiceCountsByItsLastValue) {
  EXPECT_EQ(scan(Line(base).drop("steps").add("steps", "50").add("steps", "2").text() + "\n"),
            PreviousImages::Complete);
  EXPECT_EQ(scan(Line(base).drop("steps").add("steps", "2").add("steps", "50").text() + "\n"),
            PreviousImages::OtherSettings);
  const std::string last_is_50 = Line(base).drop("steps").add("steps", "2").add("steps", "50").text() + "\n";
  EXPECT_NE(refusal(last_is_50).find("steps 50, now 2"), std::string::npos);
  EXPECT_EQ(scan(Line(base).add("steps", "\"2\"").text() + "\n"), PreviousImages::OtherSettings);
  EXPECT_EQ(scan(Line(base).add("prompt", "null").text() + "\n"), PreviousImages::OtherSettings);
  EXPECT_EQ(scan(Line(base).add("status", "\"failed\"").text() + "\n"), PreviousImages::Incomplete);
  EXPECT_EQ(scan(Line(base).drop("index").add("index", "0").add("index", "5").text() + "\n"), PreviousImages::Absent);
  // Inside the stat: the last size counts (with a sha256 that is not the file's, only a stat
  // that matches makes it complete).
  const std::string wrong = std::to_string(stat.size + 1), right = std::to_string(stat.size);
  std::string twice = stat_json(stat, wrong);
  twice.insert(twice.size() - 1, ",\"size\":" + right);
  EXPECT_EQ(scan(Line(base).set("sha256", "\"00\"").set("file_stat", twice).text() + "\n"), PreviousImages::Complete);
  twice = stat_json(stat, right);
  twice.insert(twice.size() - 1, ",\"size\":" + wrong);
  EXPECT_EQ(scan(Line(base).set("sha256", "\"00\"").set("file_stat", twice).text() + "\n"),
            PreviousImages::Incomplete);
}

TEST_F(ManifestFieldsTest, AFieldOfAnotherTypeIsNotRecorded) {
  // A setting: not the one asked for (and named), so the rerun is refused.
  EXPECT_EQ(scan(Line(base).set("steps", "\"2\"").text() + "\n"), PreviousImages::OtherSettings);
  EXPECT_NE(refusal(Line(base).set("steps", "\"2\"").text() + "\n").find("steps \"2\", now 2"), std::string::npos);
  EXPECT_EQ(scan(Line(base).set("seed", "\"7\"").text() + "\n"), PreviousImages::OtherSettings);
  EXPECT_EQ(scan(Line(base).set("prompt", "[\"a\"]").text() + "\n"), PreviousImages::OtherSettings);
  EXPECT_EQ(scan(Line(base).drop("cfg").text() + "\n"), PreviousImages::OtherSettings);
  EXPECT_NE(refusal(Line(base).drop("cfg").text() + "\n").find("cfg not recorded, now 4"), std::string::npos);
  EXPECT_EQ(scan(Line(base).set("model_checksum", "5").text() + "\n"), PreviousImages::OtherSettings);
  // The status: not "ok", so not made.
  EXPECT_EQ(scan(Line(base).set("status", "1").text() + "\n"), PreviousImages::Incomplete);
  // The stat: not recorded, so the file is hashed (complete only with the sha256 of its bytes).
  EXPECT_EQ(scan(Line(base).set("file_stat", stat_json(stat, "\"1\"")).text() + "\n"), PreviousImages::Complete);
  EXPECT_EQ(scan(Line(base).set("file_stat", stat_json(stat, "\"1\"")).set("sha256", "\"00\"").text() + "\n"),
            PreviousImages::Incomplete);
  EXPECT_EQ(scan(Line(base).set("file_stat", "[1,2,3,4]").set("sha256", "\"00\"").text() + "\n"),
            PreviousImages::Incomplete);
  const std::string size_as_float = stat_json(stat, std::to_string(stat.size) + ".0");
  EXPECT_EQ(scan(Line(base).set("file_stat", size_as_float).set("sha256", "\"00\"").text() + "\n"),
            PreviousImages::Incomplete);
  // The index: not an integer, so the line is no image's.
  EXPECT_EQ(scan(Line(base).set("index", "0.0").text() + "\n"), PreviousImages::Absent);
  EXPECT_EQ(scan(Line(base).set("index", "\"0\"").text() + "\n"), PreviousImages::Absent);
  // Older lines without a scheduler or LoRAs were made with the model's and none.
  EXPECT_EQ(scan(Line(base).drop("scheduler").drop("loras").text() + "\n"), PreviousImages::Complete);
  EXPECT_EQ(scan(Line(base).set("scheduler", "\"lightning\"").text() + "\n"), PreviousImages::OtherSettings);
  EXPECT_EQ(scan(Line(base).set("loras", "[{\"file\":\"a.safetensors\",\"sha256\":\"ab\",\"strength\":1.0}]").text() +
                 "\n"),
            PreviousImages::OtherSettings);
}

TEST_F(ManifestFieldsTest, TornAndForeignLinesAreSkippedAndTheLastLineWins) {
  const std::string text = base.text();
  // Cut by a kill: no newline at the end, or (an older writer) a line cut short.
  EXPECT_EQ(scan(text), PreviousImages::Absent);
  EXPECT_EQ(scan(text.substr(0, text.size() / 2) + "\n"), PreviousImages::Absent);
  EXPECT_EQ(scan("[0]\n\"ok\"\n\n{}\n" + text.substr(0, 40) + "\n"), PreviousImages::Absent);
  // A whole line after a torn one still counts; a later line overrides an earlier one.
  EXPECT_EQ(scan(text.substr(0, 40) + "\n" + text + "\n"), PreviousImages::Complete);
  EXPECT_EQ(scan(text + "\n" + Line(base).set("status", "\"failed\"").text() + "\n"), PreviousImages::Incomplete);
  EXPECT_EQ(scan(Line(base).set("steps", "3").text() + "\n" + text + "\n"), PreviousImages::Complete);
  // Trailing bytes after the object make it no JSON.
  EXPECT_EQ(scan(text + "x\n"), PreviousImages::Absent);
  EXPECT_EQ(scan(text + "{}\n"), PreviousImages::Absent);
}

TEST_F(ManifestFieldsTest, APartsLineWinsOverManifestJsonl) {
  // A later run's part (the writer gone) re-made the image, or failed it: its line counts.
  test::write_text(out / ".manifest/run2-rank00000.jsonl", Line(base).set("status", "\"failed\"").text() + "\n");
  EXPECT_EQ(scan(base.text() + "\n"), PreviousImages::Incomplete);
  test::write_text(out / ".manifest/run2-rank00000.jsonl", base.text() + "\n");
  EXPECT_EQ(scan(Line(base).set("status", "\"failed\"").text() + "\n"), PreviousImages::Complete);
  EXPECT_EQ(scan(Line(base).set("steps", "3").text() + "\n"), PreviousImages::Complete);
}

TEST_F(ManifestFieldsTest, WhatTheFullParserAcceptsBeyondJsonStillCounts) {
  // nlohmann skips a UTF-8 byte order mark (as RFC 8259 lets a parser) and ends its input at a
  // NUL byte; simdjson refuses both, so such a line is read by the full parser as before.
  EXPECT_EQ(scan("\xEF\xBB\xBF" + base.text() + "\n"), PreviousImages::Complete);
  EXPECT_EQ(scan(base.text() + std::string(1, '\0') + "junk\n"), PreviousImages::Complete);
  // Integers past 64 bits are floats to nlohmann (no index, no seed), a number error to simdjson.
  EXPECT_EQ(scan(Line(base).set("index", "-9223372036854775809").text() + "\n"), PreviousImages::Absent);
  EXPECT_EQ(scan(Line(base).set("run_id", "18446744073709551616").text() + "\n"), PreviousImages::Complete);
}

TEST_F(ManifestFieldsTest, AFileOutsideTheFolderIsRefused) {
  // Its settings are this run's, but the file is another: not this image's, and not a plain name.
  for (const char* file : {"\"../x.png\"", "\"/etc/passwd\"", "\"\"", "7"}) {
    EXPECT_EQ(scan(Line(base).set("file", file).text() + "\n"), PreviousImages::Incomplete) << file;
  }
  std::filesystem::remove(png);
  EXPECT_EQ(scan(base.text() + "\n"), PreviousImages::Incomplete);
}

// A WebDataset folder: the image packed as a member of 00000.tar (its record beside it), or
// staged as 00000/<key>.png with its .json. Each verdict as the full parser's path gives it.
class WebDatasetLinesTest : public ManifestFieldsTest {
 protected:
  void SetUp() override {
    ManifestFieldsTest::SetUp();
    jobs = resolve_jobs({prompt_entry()}, defaults(), Log::quiet(),
                        OutputLayout::parse("flat", "webdataset", kDefaultImagesPerTar));
    key.images_per_tar = kDefaultImagesPerTar;
    const ImageJob& job = jobs[0];
    const std::string png_bytes = read_file(png), record_bytes = "{\"index\":0}";
    std::filesystem::create_directories(out / job.folder);
    test::write_text(out / job.file(), png_bytes);
    test::write_text(out / job.file(".json"), record_bytes);
    TarWriter tar(out / job.tar);
    png_offset = tar.add(job.file_stem + ".png", png_bytes);
    json_offset = tar.add(job.file_stem + ".json", record_bytes);
    tar.commit();
    tar_stat = *stat_regular_file(out / job.tar);
    staged = Line(base)
                 .set("file", nlohmann::json(job.file()).dump())
                 .set("file_stat", stat_json(*stat_regular_file(out / job.file()), std::to_string(png_bytes.size())))
                 .set("images_per_tar", std::to_string(kDefaultImagesPerTar))
                 .set("json_file", nlohmann::json(job.file(".json")).dump())
                 .set("json_sha256", "\"" + sha256_hex(record_bytes) + "\"")
                 .set("json_file_stat", stat_json(*stat_regular_file(out / job.file(".json")),
                                                  std::to_string(record_bytes.size())));
    packed = Line(staged)
                 .set("file", "\"" + job.tar + "\"")
                 .set("file_stat", stat_json(tar_stat, std::to_string(tar_stat.size)))
                 .set("member", "\"" + job.file_stem + ".png\"")
                 .set("member_offset", std::to_string(png_offset))
                 .set("member_size", std::to_string(png_bytes.size()))
                 .set("json_member", "\"" + job.file_stem + ".json\"")
                 .set("json_member_offset", std::to_string(json_offset))
                 .set("json_member_size", std::to_string(record_bytes.size()));
  }
  // As scan(), with a packed image's state (Packed) compared too.
  PreviousImages::State scan_tar(const std::string& text) {
    test::write_text(out / "manifest.jsonl", text);
    const PreviousImages previous = scan_previous_images(out.path(), jobs, key);
    const bool reference = image_is_complete(out.path(), jobs[0], key, read_manifest(out.path()));
    const auto state = static_cast<PreviousImages::State>(previous.state[0]);
    EXPECT_EQ(state == PreviousImages::Complete || state == PreviousImages::Packed, reference) << text;
    return state;
  }

  int64_t png_offset = 0, json_offset = 0;
  FileStat tar_stat;
  Line staged, packed;
};

TEST_F(WebDatasetLinesTest, APackedImageIsWholeByItsTarsStatAndReadWhereTheStatDiffers) {
  EXPECT_EQ(scan_tar(packed.text() + "\n"), PreviousImages::Packed);
  EXPECT_EQ(scan_tar(Line(packed).set("sha256", "\"00\"").text() + "\n"), PreviousImages::Packed);  // not read
  // The tar's stat listed otherwise: its members are read where the line places them.
  const std::string other_stat = stat_json(tar_stat, std::to_string(tar_stat.size + 512));
  EXPECT_EQ(scan_tar(Line(packed).set("file_stat", other_stat).text() + "\n"), PreviousImages::Packed);
  EXPECT_EQ(scan_tar(Line(packed).set("file_stat", other_stat).set("sha256", "\"00\"").text() + "\n"),
            PreviousImages::Incomplete);
  const std::string at_the_record = std::to_string(json_offset);
  EXPECT_EQ(scan_tar(Line(packed).set("file_stat", other_stat).set("member_offset", at_the_record).text() + "\n"),
            PreviousImages::Incomplete);
  // A member the line cannot place, or of another name, is not whole however the stat reads.
  for (const auto& [field, raw] : std::vector<std::pair<std::string, std::string>>{
           {"member_offset", "-1"}, {"member_offset", "\"512\""}, {"member_size", "1.5"}, {"json_member", "3"},
           {"json_member", "\"../x.json\""}, {"json_member_size", "null"}, {"file", "\"00000.tgz\""},
           {"file", "\"../00000.tar\""}, {"member", "\"x.png\""}, {"member", "\"\""}}) {
    const PreviousImages::State state = scan_tar(Line(packed).set(field, raw).text() + "\n");
    EXPECT_TRUE(state != PreviousImages::Packed && state != PreviousImages::Complete) << field << " " << raw;
  }
  // A member that is not a string: the line lists a staged file, the tar itself, not this image's.
  EXPECT_EQ(scan_tar(Line(packed).set("member", "7").text() + "\n"), PreviousImages::OtherSettings);
  // Another tar size is another set of images: refused, named.
  EXPECT_EQ(scan_tar(Line(packed).set("images_per_tar", "3").text() + "\n"), PreviousImages::OtherSettings);
  EXPECT_EQ(scan_tar(Line(packed).drop("images_per_tar").text() + "\n"), PreviousImages::OtherSettings);
  EXPECT_NE(refusal(Line(packed).set("images_per_tar", "3").text() + "\n").find("images_per_tar 3, now 1000"),
            std::string::npos);
  // The tar changed (a byte of its padding): its stat differs, so its members are read, and are whole.
  {
    const int fd = ::open((out / jobs[0].tar).c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "\0", 1, tar_stat.size - 1), 1);
    ::close(fd);
  }
  EXPECT_EQ(scan_tar(packed.text() + "\n"), PreviousImages::Packed);
  EXPECT_EQ(scan_tar(Line(packed).set("sha256", "\"00\"").text() + "\n"), PreviousImages::Incomplete);
}

TEST_F(WebDatasetLinesTest, AStagedImageIsItsPngAndItsRecord) {
  EXPECT_EQ(scan_tar(staged.text() + "\n"), PreviousImages::Complete);
  EXPECT_EQ(scan_tar(Line(staged).set("json_sha256", "\"00\"").text() + "\n"), PreviousImages::Complete);
  // The record's stat not listed: hashed; listed nowhere, or outside the folder: not whole.
  EXPECT_EQ(scan_tar(Line(staged).drop("json_file_stat").text() + "\n"), PreviousImages::Complete);
  EXPECT_EQ(scan_tar(Line(staged).drop("json_file_stat").set("json_sha256", "\"00\"").text() + "\n"),
            PreviousImages::Incomplete);
  EXPECT_EQ(scan_tar(Line(staged).drop("json_file").text() + "\n"), PreviousImages::Incomplete);
  EXPECT_EQ(scan_tar(Line(staged).set("json_file", "\"../x.json\"").text() + "\n"), PreviousImages::Incomplete);
  std::filesystem::remove(out / jobs[0].file(".json"));
  EXPECT_EQ(scan_tar(staged.text() + "\n"), PreviousImages::Incomplete);
}

TEST(ManifestFieldParser, ReadsTheFieldsAndSaysWhenItCannot) {
  ManifestFieldParser parser;
  ManifestFields f;
  ASSERT_EQ(parser.parse("{\"index\":3,\"status\":\"ok\",\"seed\":18446744073709551615,\"width\":-16,"
                         "\"cfg\":4.1,\"prompt\":\"a\\\"b\",\"loras\":[ {\"a\" : 1} ],\"file_stat\":{\"size\":1,"
                         "\"mtime_ns\":2,\"inode\":3,\"device\":4}}",
                         f),
            ManifestFieldParser::Fields);
  EXPECT_EQ(f.index, 3);
  EXPECT_EQ(f.status, "ok");
  EXPECT_EQ(f.seed, uint64_t{18446744073709551615u});
  EXPECT_EQ(f.width, -16);
  EXPECT_EQ(f.cfg, 4.1f);
  EXPECT_EQ(f.prompt, "a\"b");
  EXPECT_EQ(f.loras, "[{\"a\":1}]");
  EXPECT_EQ(f.file_stat, (FileStat{1, 2, 3, 4}));
  EXPECT_FALSE(f.height.has_value());
  EXPECT_EQ(f.scheduler, std::nullopt);
  ASSERT_EQ(parser.parse("{\"index\":0,\"member\":\"a.png\",\"member_offset\":512,\"member_size\":\"9\","
                         "\"json_member\":null,\"images_per_tar\":1000}",
                         f),
            ManifestFieldParser::Fields);
  EXPECT_EQ(f.member, "a.png");
  EXPECT_EQ(f.member_offset, 512);
  EXPECT_EQ(f.member_size, -1);
  EXPECT_EQ(f.json_member, std::nullopt);
  EXPECT_EQ(f.json_member_offset, -1);
  EXPECT_EQ(f.images_per_tar, 1000);
  EXPECT_EQ(parser.parse("{\"index\":1,\"member\":\"a\",\"member\":\"b\"}", f), ManifestFieldParser::Unsure);
  EXPECT_EQ(parser.parse("{\"index\":1,\"index\":2}", f), ManifestFieldParser::Unsure);
  EXPECT_EQ(parser.parse("{\"index\":1,\"scheduler\":5}", f), ManifestFieldParser::Unsure);
  EXPECT_EQ(parser.parse("{\"index\":1", f), ManifestFieldParser::Unsure);
  EXPECT_EQ(parser.parse("{\"index\":1.5}", f), ManifestFieldParser::NotALine);
  EXPECT_EQ(parser.parse("[1]", f), ManifestFieldParser::NotALine);
}

// An edit's input images are part of what its line records: the same files (path as given and
// sha256) resume it; a changed file at the path, or another path, remakes it (the same edit of
// a new input), never refuses the rerun; a text-to-image line lists none.
TEST_F(ManifestFieldsTest, AnEditIsRemadeWhenItsInputImageChanged) {
  jobs[0].images = {{"in/a.png", "/data/in/a.png", std::string(64, 'a'), 40, 30},
                    {"b.jpg", "/data/b.jpg", std::string(64, 'b'), 50, 20}};
  const std::string listed = input_images_json(jobs[0]).dump();
  EXPECT_EQ(listed, "[{\"path\":\"in/a.png\",\"sha256\":\"" + std::string(64, 'a') + "\"},{\"path\":\"b.jpg\","
                    "\"sha256\":\"" + std::string(64, 'b') + "\"}]");
  EXPECT_EQ(scan(Line(base).set("input_images", listed).text() + "\n"), PreviousImages::Complete);
  // spaced differently: the quick parser's bytes differ, the full parser's values agree
  std::string spaced = listed;
  spaced.insert(1, " ");
  EXPECT_EQ(scan(Line(base).set("input_images", spaced).text() + "\n"), PreviousImages::Complete);
  std::string other_file = listed;
  other_file[other_file.find('b' , other_file.find("b.jpg") + 20)] = 'c';
  EXPECT_EQ(scan(Line(base).set("input_images", other_file).text() + "\n"), PreviousImages::Incomplete);
  EXPECT_EQ(refusal(Line(base).set("input_images", other_file).text() + "\n"), "");
  EXPECT_EQ(scan(base.text() + "\n"), PreviousImages::Incomplete);  // made before without inputs
  jobs[0].images.clear();
  EXPECT_EQ(scan(Line(base).set("input_images", listed).text() + "\n"), PreviousImages::Incomplete);
  EXPECT_EQ(scan(base.text() + "\n"), PreviousImages::Complete);
}
