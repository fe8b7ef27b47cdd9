// An image's record (its manifest line, a WebDataset sample's .json) is written and read in one
// place: what it writes must read back as the same record, and its bytes must be the documented
// format (sorted keys, compact JSON, UTF-8 as is, cfg from a float), which users' tools parse and
// old manifests hold. The expected lines here are written out by hand from that format.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "io/image_record.h"
#include "pipeline/job.h"
#include "pipeline/resume.h"
#include "pipeline/runner.h"

using namespace ditbatch;
using nlohmann::json;

namespace {

// A failed image: the fields every line has, with the awkward values a record must carry.
ImageRecord failed_image() {
  ImageRecord r;
  r.index = 7;
  r.prompt = "Fuchs im Schnee \xE2\x80\x94 \xE9\x9B\xAA\xE3\x81\xAE\xE7\x8B\x90 \xF0\x9F\xA6\x8A, \"say\" \\ hi";
  r.negative_prompt = "";
  r.seed = std::numeric_limits<uint64_t>::max();
  r.width = 1024;
  r.height = 768;
  r.steps = 50;
  r.cfg = 3.25f;
  r.true_cfg = true;
  r.model = "qwen-image";
  r.model_checksum = "ab12cd";
  r.scheduler = "FlowMatchEulerDiscrete";
  r.max_sequence_length = 512;
  r.prompt_tokens = 9;
  r.run_id = "slurm42-3";
  r.host = "node01";
  r.rank = 3;
  r.started = "2026-12-02T10:00:00.125Z";
  r.finished = "2026-12-02T10:00:05Z";
  r.timings = {0.5, 4.5, 0.0, 5.25, 0.0};
  r.status = "failed";
  r.error = "image 7: NaN in the latents after step 3";
  r.file = "000007-fuchs-im-schnee.png";
  return r;
}

// A packed WebDataset image: every optional field of the files set.
ImageRecord packed_image() {
  ImageRecord r = failed_image();
  r.prompt = "a red fox";
  r.negative_prompt = " ";
  r.seed = 0;
  r.cfg = 4.0f;
  r.loras = nlohmann::json::array({{{"file", "style.safetensors"}, {"sha256", "1a2b"}, {"strength", 0.7}}});
  r.negative_prompt_tokens = 1;
  r.images_per_tar = 1000;
  r.status = "ok";
  r.error.reset();
  r.file = "00000.tar";
  r.sha256 = "5e5e";
  r.file_stat = FileStat{4096, -1'000'000'007, std::numeric_limits<uint64_t>::max(), 2049};
  r.json_sha256 = "7a7a";
  r.member = TarMember{"000000007.png", 3584, 2048};
  r.json_member = TarMember{"000000007.json", 6144, 900};
  return r;
}

}  // namespace

TEST(ImageRecord, ALineIsTheDocumentedFormatByteForByte) {
  // Keys sorted, no spaces, non-ASCII UTF-8 as is, '"' and '\' escaped, the seed as an unsigned
  // 64-bit integer, a number from a double with its ".0".
  const std::string expected =
      "{\"cfg\":3.25,\"error\":\"image 7: NaN in the latents after step 3\",\"file\":\"000007-fuchs-im-schnee.png\","
      "\"finished\":\"2026-12-02T10:00:05Z\",\"height\":768,\"host\":\"node01\",\"index\":7,\"loras\":[],"
      "\"max_sequence_length\":512,\"model\":\"qwen-image\",\"model_checksum\":\"ab12cd\",\"negative_prompt\":\"\","
      "\"prompt\":\"Fuchs im Schnee \xE2\x80\x94 \xE9\x9B\xAA\xE3\x81\xAE\xE7\x8B\x90 \xF0\x9F\xA6\x8A, \\\"say\\\" "
      "\\\\ hi\",\"prompt_tokens\":9,\"rank\":3,\"run_id\":\"slurm42-3\",\"scheduler\":\"FlowMatchEulerDiscrete\","
      "\"seed\":18446744073709551615,\"started\":\"2026-12-02T10:00:00.125Z\",\"status\":\"failed\",\"steps\":50,"
      "\"timings\":{\"text_encoder_s\":0.5,\"total_s\":5.25,\"transformer_s\":4.5,\"vae_s\":0.0,\"write_s\":0.0},"
      "\"true_cfg\":true,\"width\":1024}";
  EXPECT_EQ(failed_image().manifest_line(), expected);
}

TEST(ImageRecord, APackedLineListsItsTarAndMembers) {
  const std::string expected =
      "{\"cfg\":4.0,\"file\":\"00000.tar\",\"file_stat\":{\"device\":2049,\"inode\":18446744073709551615,"
      "\"mtime_ns\":-1000000007,\"size\":4096},\"finished\":\"2026-12-02T10:00:05Z\",\"height\":768,"
      "\"host\":\"node01\",\"images_per_tar\":1000,\"index\":7,\"json_member\":\"000000007.json\","
      "\"json_member_offset\":6144,\"json_member_size\":900,\"json_sha256\":\"7a7a\","
      "\"loras\":[{\"file\":\"style.safetensors\",\"sha256\":\"1a2b\",\"strength\":0.7}],"
      "\"max_sequence_length\":512,\"member\":\"000000007.png\",\"member_offset\":3584,\"member_size\":2048,"
      "\"model\":\"qwen-image\",\"model_checksum\":\"ab12cd\",\"negative_prompt\":\" \","
      "\"negative_prompt_tokens\":1,\"prompt\":\"a red fox\",\"prompt_tokens\":9,\"rank\":3,"
      "\"run_id\":\"slurm42-3\",\"scheduler\":\"FlowMatchEulerDiscrete\",\"seed\":0,\"sha256\":\"5e5e\","
      "\"started\":\"2026-12-02T10:00:00.125Z\",\"status\":\"ok\",\"steps\":50,"
      "\"timings\":{\"text_encoder_s\":0.5,\"total_s\":5.25,\"transformer_s\":4.5,\"vae_s\":0.0,\"write_s\":0.0},"
      "\"true_cfg\":true,\"width\":1024}";
  EXPECT_EQ(packed_image().manifest_line(), expected);
}

TEST(ImageRecord, WhatIsWrittenReadsBackAsTheSameRecord) {
  ImageRecord latents = packed_image();
  latents.file = "00001/000012345-fox.png";
  latents.member.reset();
  latents.json_member.reset();
  latents.images_per_tar.reset();
  latents.latents_file = "00001/000012345-fox.latents.h5";
  latents.latents_sha256 = "9f9f";
  latents.latents_file_stat = FileStat{1, 2, 3, 4};
  latents.json_file = "00001/000012345-fox.json";
  latents.json_file_stat = FileStat{5, 6, 7, 8};
  ImageRecord float_cfg = failed_image();
  float_cfg.cfg = 4.1f;  // a float's value, not the decimal 4.1
  for (const ImageRecord& written : {failed_image(), packed_image(), latents, float_cfg}) {
    const std::optional<ImageRecord> read = ImageRecord::parse(written.manifest_line());
    ASSERT_TRUE(read.has_value()) << written.manifest_line();
    EXPECT_EQ(*read, written) << written.manifest_line();
    EXPECT_EQ(read->other, nlohmann::json::object()) << "every field is one the record knows";
    EXPECT_EQ(read->manifest_line(), written.manifest_line());
  }
  EXPECT_EQ(static_cast<float>(ImageRecord::parse(float_cfg.manifest_line())->cfg), 4.1f);
}

TEST(ImageRecord, ASampleIsTheRecordLessWhereItsPngLies) {
  const ImageRecord staged = packed_image();
  const nlohmann::json sample = nlohmann::json::parse(staged.sample_text());
  nlohmann::json line = nlohmann::json::parse(staged.manifest_line());
  ASSERT_TRUE(line.contains("file") && line.contains("file_stat"));
  line.erase("file");
  line.erase("file_stat");
  EXPECT_EQ(sample, line);
  ImageRecord read = *ImageRecord::parse(staged.sample_text());
  EXPECT_EQ(read.file, "");
  EXPECT_FALSE(read.file_stat.has_value());
  EXPECT_EQ(read.sample_text(), staged.sample_text());
}

TEST(ImageRecord, FieldsOfAnotherToolOrTypeAreWrittenBackAsRead) {
  // A line edited by hand: a seed as text, an integer cfg, a stat missing its device, half a
  // member, a field ditbatch does not write. Each stays as it was, and none reads as a setting.
  const std::string line =
      "{\"cfg\":4,\"file\":\"a.png\",\"file_stat\":{\"inode\":1,\"mtime_ns\":2,\"size\":3},\"finished\":\"\","
      "\"height\":16,\"host\":\"\",\"index\":0,\"loras\":[],\"member\":\"a.png\",\"model\":\"\","
      "\"model_checksum\":\"\",\"negative_prompt\":\"\",\"note\":{\"by\":\"hand\"},\"prompt\":\"fox\",\"rank\":0,"
      "\"run_id\":\"\",\"scheduler\":\"\",\"seed\":\"5\",\"started\":\"\",\"status\":\"ok\",\"steps\":2,"
      "\"timings\":{\"text_encoder_s\":0.0,\"total_s\":0.0,\"transformer_s\":0.0,\"vae_s\":0.0,\"write_s\":0.0},"
      "\"true_cfg\":false,\"width\":16}";
  const ImageRecord read = *ImageRecord::parse(line);
  EXPECT_EQ(read.seed, 0u);
  EXPECT_EQ(read.cfg, 1.0);
  EXPECT_FALSE(read.file_stat.has_value());
  EXPECT_FALSE(read.member.has_value());
  EXPECT_EQ(read.other, nlohmann::json::parse("{\"cfg\":4,\"file_stat\":{\"inode\":1,\"mtime_ns\":2,\"size\":3},"
                                              "\"member\":\"a.png\",\"note\":{\"by\":\"hand\"},\"seed\":\"5\"}"));
  EXPECT_EQ(read.manifest_line(), line);
  EXPECT_FALSE(ImageRecord::parse("[1,2]").has_value());
  EXPECT_FALSE(ImageRecord::parse("{\"index\":1,").has_value());
}

TEST(ImageRecord, AJobsRecordHoldsWhatItsImageIsMadeWith) {
  ImageJob job;
  job.index = 12;
  job.prompt = "a fox";
  job.negative_prompt = "blurry";
  job.seed = 99;
  job.width = 512;
  job.height = 256;
  job.steps = 20;
  job.cfg = 3.25f;
  job.file_stem = "000012-a-fox";
  job.folder = "00000";
  job.true_cfg = true;
  ImageRecord r = image_record_of(job);
  EXPECT_EQ(r.negative_prompt, "blurry");
  EXPECT_EQ(r.cfg, 3.25);
  EXPECT_EQ(r.file, "00000/000012-a-fox.png");
  EXPECT_EQ(r.index, 12);
  EXPECT_EQ(r.seed, 99u);
  EXPECT_EQ(r.width, 512);
  EXPECT_EQ(r.height, 256);
  EXPECT_EQ(r.steps, 20);
  // Without true CFG (cfg 1, or no negative prompt) the denoiser sees neither.
  job.true_cfg = false;
  r = image_record_of(job);
  EXPECT_EQ(r.negative_prompt, "");
  EXPECT_EQ(r.cfg, 1.0);
  EXPECT_FALSE(r.true_cfg);
}

TEST(ImageRecord, ThePngTextIsTheRecordsSettings) {
  ImageRecord r = packed_image();
  r.cfg = 4.1f;
  const PngText text = png_metadata(r);
  auto chunk = [&](const std::string& key) {
    for (const auto& [k, v] : text)
      if (k == key) return v;
    return std::string("(absent)");
  };
  EXPECT_EQ(text.front().first, "parameters");
  EXPECT_EQ(chunk("prompt"), "a red fox");
  EXPECT_EQ(chunk("negative_prompt"), " ");
  EXPECT_EQ(chunk("seed"), "0");
  EXPECT_EQ(chunk("steps"), "50");
  EXPECT_EQ(chunk("cfg"), "4.1");
  EXPECT_EQ(chunk("size"), "1024x768");
  EXPECT_EQ(chunk("scheduler"), "FlowMatchEulerDiscrete");
  EXPECT_EQ(chunk("loras"), "[{\"file\":\"style.safetensors\",\"sha256\":\"1a2b\",\"strength\":0.7}]");
  EXPECT_EQ(chunk("model"), "qwen-image");
  EXPECT_EQ(chunk("model_checksum"), "ab12cd");
  EXPECT_EQ(chunk("max_sequence_length"), "512");
  EXPECT_TRUE(chunk("parameters").starts_with("a red fox <lora:style:0.7>\nNegative prompt:  \nSteps: 50, Sampler: "
                                              "FlowMatchEulerDiscrete, CFG scale: 4.1, Seed: 0, Size: 1024x768, "
                                              "Model hash: ab12cd, Model: qwen-image, Lora hashes: \"style: 1a2b\", "
                                              "Version: ditbatch "))
      << chunk("parameters");
  EXPECT_EQ(chunk("input_images"), "(absent)");  // text-to-image: no chunk, no A1111 part

  // An edit names its inputs: a chunk of the record's list, and an A1111 part quoted as one
  // value (a path may hold a comma); the record round-trips it, a sample's .json carries it.
  r.input_images = json::array({{{"path", "in/a, b.png"}, {"sha256", "0123456789abcdef"}},
                                {{"path", "c.webp"}, {"sha256", "fedcba9876543210"}}});
  const PngText edit = png_metadata(r);
  std::string parameters, listed;
  for (const auto& [k, v] : edit) {
    if (k == "parameters") parameters = v;
    if (k == "input_images") listed = v;
  }
  EXPECT_EQ(json::parse(listed), r.input_images);
  EXPECT_NE(parameters.find(", Lora hashes: \"style: 1a2b\", Input images: \"in/a, b.png: 0123456789, c.webp: "
                            "fedcba9876\", Version: "),
            std::string::npos)
      << parameters;
  EXPECT_EQ(ImageRecord::parse(r.manifest_line())->input_images, r.input_images);
  EXPECT_EQ(json::parse(r.sample_text())["input_images"], r.input_images);
}
