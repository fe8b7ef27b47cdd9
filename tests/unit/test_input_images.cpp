// Input images decoded as diffusers' load_image decodes them (Pillow 13: open, exif_transpose,
// convert("RGB")): every file of tests/data/golden/input_images/ against Pillow's own pixels
// (tools/golden/golden_input_images.py), and the files a run must refuse, each by name.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "io/exif_orientation.h"
#include "io/h5.h"
#include "io/image_read.h"
#include "core/sha256.h"
#include "cluster/shard.h"
#include "pipeline/input_images.h"
#include "tiny_model.h"
#include "test_util.h"

namespace ditbatch {
namespace {

std::string input_image(const std::string& name) { return test::golden("input_images/" + name); }

struct PixelAgreement {
  int64_t differing = 0, max_diff = 0;
};

PixelAgreement compare(const RgbImage& ours, const std::string& want, int64_t h, int64_t w) {
  EXPECT_EQ(ours.height, h);
  EXPECT_EQ(ours.width, w);
  PixelAgreement a;
  if (ours.height != h || ours.width != w) return {h * w * 3, 255};
  for (size_t i = 0; i < want.size(); ++i) {
    const int64_t d = std::abs(int64_t{ours.rgb[i]} - int64_t{static_cast<uint8_t>(want[i])});
    a.differing += d != 0;
    a.max_diff = std::max(a.max_diff, d);
  }
  return a;
}

TEST(InputImages, EveryFileDecodesToPillowsPixelsBitForBit) {
  h5::File f = h5::File::open_read(test::golden("input_images.h5"));
  const auto names = f.root().members();
  ASSERT_GE(names.size(), 35u);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const h5::Group g = f.root().open_group(name);
    const h5::DatasetInfo info = g.dataset_info("rgb");
    ASSERT_EQ(info.shape.size(), 3u);
    std::string want(static_cast<size_t>(info.shape[0] * info.shape[1] * 3), '\0');
    g.read_dataset_raw("rgb", want.data());
    const RgbImage ours = decode_input_image(read_file(input_image(name)), name);
    const PixelAgreement a = compare(ours, want, info.shape[0], info.shape[1]);
    EXPECT_EQ(a.differing, 0) << "max difference " << a.max_diff;
  }
}

// The golden files are not all alike: the orientations turn, the 16-bit grey clips, the palette
// past its end is black (what the bit-for-bit test above would miss if the files were dull).
TEST(InputImages, TheGoldenFilesExerciseEachRule) {
  const RgbImage upright = decode_input_image(read_file(input_image("rgb8.png")), "rgb8.png");
  const RgbImage turned = decode_input_image(read_file(input_image("rgb8_exif6.png")), "rgb8_exif6.png");
  ASSERT_EQ(upright.width, 13);
  ASSERT_EQ(turned.width, upright.height);
  ASSERT_EQ(turned.height, upright.width);
  // orientation 6 turns clockwise: the stored bottom-left pixel comes to the top left
  for (int c = 0; c < 3; ++c) EXPECT_EQ(turned.at(0, 0, c), upright.at(upright.height - 1, 0, c));
  const RgbImage grey16 = decode_input_image(read_file(input_image("grey16.png")), "grey16.png");
  EXPECT_EQ(grey16.at(0, 1, 0), 255);  // stored 255
  EXPECT_EQ(grey16.at(0, 2, 0), 255);  // stored 256: clipped, not its high byte 1
  const RgbImage past = decode_input_image(read_file(input_image("palette_past_plte.png")), "palette_past_plte.png");
  int black = 0;
  for (size_t i = 0; i < past.rgb.size(); i += 3) black += past.rgb[i] == 0 && past.rgb[i + 1] == 0 && past.rgb[i + 2] == 0;
  EXPECT_GT(black, 0);
}

TEST(InputImages, OrientationsTurnAsPillowNamesThem) {
  RgbImage im;  // 3 wide, 2 high: pixel value = 10 * row + column
  im.width = 3, im.height = 2;
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 3; ++x)
      for (int c = 0; c < 3; ++c) im.rgb.push_back(static_cast<uint8_t>(10 * y + x));
  auto rows = [](const RgbImage& r) {
    std::vector<std::vector<int>> out(r.height);
    for (int64_t y = 0; y < r.height; ++y)
      for (int64_t x = 0; x < r.width; ++x) out[y].push_back(r.at(y, x, 0));
    return out;
  };
  using Rows = std::vector<std::vector<int>>;
  EXPECT_EQ(rows(apply_orientation(im, 1)), (Rows{{0, 1, 2}, {10, 11, 12}}));
  EXPECT_EQ(rows(apply_orientation(im, 2)), (Rows{{2, 1, 0}, {12, 11, 10}}));
  EXPECT_EQ(rows(apply_orientation(im, 3)), (Rows{{12, 11, 10}, {2, 1, 0}}));
  EXPECT_EQ(rows(apply_orientation(im, 4)), (Rows{{10, 11, 12}, {0, 1, 2}}));
  EXPECT_EQ(rows(apply_orientation(im, 5)), (Rows{{0, 10}, {1, 11}, {2, 12}}));
  EXPECT_EQ(rows(apply_orientation(im, 6)), (Rows{{10, 0}, {11, 1}, {12, 2}}));
  EXPECT_EQ(rows(apply_orientation(im, 7)), (Rows{{12, 2}, {11, 1}, {10, 0}}));
  EXPECT_EQ(rows(apply_orientation(im, 8)), (Rows{{2, 12}, {1, 11}, {0, 10}}));
}

std::string refusal(const std::string& bytes, const std::string& name) {
  try {
    decode_input_image(bytes, name);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

uint32_t crc_of(const std::string& kind_and_data);

// A PNG whose IHDR says `width` x `height`, its CRC right, and no more.
std::string png_header_claiming(uint32_t width, uint32_t height) {
  std::string ihdr = "IHDR";
  for (uint32_t v : {width, height})
    for (int s = 24; s >= 0; s -= 8) ihdr.push_back(static_cast<char>((v >> s) & 0xFF));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);
  std::string out = "\x89PNG\r\n\x1a\n";
  out += std::string("\0\0\0\x0d", 4) + ihdr;
  const uint32_t crc = crc_of(ihdr);
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((crc >> s) & 0xFF));
  return out;
}

uint32_t crc_of(const std::string& bytes) {  // PNG's CRC-32, bit by bit
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

TEST(InputImages, BrokenAndHostileFilesAreRefusedByName) {
  const std::string png = read_file(input_image("rgb8.png"));
  const std::string jpeg = read_file(input_image("q90_420.jpg"));
  const std::string webp = read_file(input_image("lossy.webp"));

  EXPECT_NE(refusal(png.substr(0, png.size() / 2), "a.png (p.jsonl:3)").find("a.png (p.jsonl:3): not a readable PNG"),
            std::string::npos);
  EXPECT_NE(refusal(jpeg.substr(0, jpeg.size() / 2), "b.jpg").find("b.jpg: not a readable JPEG"), std::string::npos);
  EXPECT_NE(refusal(webp.substr(0, webp.size() / 2), "c.webp").find("c.webp: not a readable WebP"), std::string::npos);
  EXPECT_NE(refusal("GIF89a....", "d.gif").find("d.gif: not a PNG, JPEG or WebP"), std::string::npos);
  EXPECT_NE(refusal("", "empty.png").find("empty.png: not a PNG, JPEG or WebP"), std::string::npos);

  // A header that lies (or a bomb): refused by its size before a pixel is decoded.
  const std::string bomb = refusal(png_header_claiming(20000, 20000), "bomb.png");
  EXPECT_NE(bomb.find("bomb.png: a PNG of 20000x20000 = 400000000 pixels is past the limit of 178956970"),
            std::string::npos)
      << bomb;
  // Within the limit but with no data behind the header: truncated.
  EXPECT_NE(refusal(png_header_claiming(1, 100000), "strip.png").find("strip.png: not a readable PNG"),
            std::string::npos);
  // One bit changed inside the image data: the CRC says so.
  std::string flipped = png;
  flipped[png.find("IDAT") + 10] ^= 0x01;
  EXPECT_NE(refusal(flipped, "flip.png").find("flip.png: not a readable PNG"), std::string::npos);
}

TEST(InputImages, OrientationReadsEachSourceAndSurvivesDamage) {
  // EXIF first, XMP only where EXIF names no orientation; damaged blocks say nothing.
  const std::string block_le = std::string("II*\0\x08\0\0\0\x01\0\x12\x01\x03\0\x01\0\0\0\x06\0\0\0\0\0\0\0", 26);
  EXPECT_EQ(image_orientation(block_le, ""), 6);
  EXPECT_EQ(image_orientation(std::string("Exif\0\0", 6) + block_le, "tiff:Orientation=\"3\""), 6);
  EXPECT_EQ(image_orientation("", "<tiff:Orientation>8</tiff:Orientation>"), 8);
  EXPECT_EQ(image_orientation(block_le.substr(0, 14), ""), 1);      // the directory cut short
  EXPECT_EQ(image_orientation(std::string("II*\0\xff\xff\0\0", 8), ""), 1);  // IFD past the end
  EXPECT_EQ(image_orientation("garbage", "tiff:Orientation=\"x\""), 1);
}

}  // namespace
}  // namespace ditbatch

namespace ditbatch {
namespace {

ImageJob job_with_images(const std::string& origin, const std::vector<std::string>& files) {
  ImageJob job;
  job.origin = origin;
  for (const std::string& f : files) job.images.push_back({f, f});
  return job;
}

// Every image is read, hashed and decoded before the run; the first bad one in prompt order
// is the error, naming the line and the file, whichever thread found it.
TEST(InputImages, InspectionHashesDecodesAndNamesTheFirstBadImage) {
  test::TempDir dir;
  const std::string good = input_image("q90_420.jpg"), turned = input_image("exif6.jpg");
  std::vector<ImageJob> jobs = {job_with_images("p.jsonl:1", {good}), job_with_images("p.jsonl:2", {good, turned})};
  inspect_input_images(jobs, 2);
  EXPECT_EQ(jobs[0].images[0].sha256, sha256_file(good));
  EXPECT_EQ(jobs[0].images[0].width, 37);
  EXPECT_EQ(jobs[0].images[0].height, 23);
  EXPECT_EQ(jobs[1].images[1].width, 23);  // upright: orientation 6 turns it
  EXPECT_EQ(jobs[1].images[1].height, 37);

  std::filesystem::create_symlink("/dev/zero", dir / "zero.png");
  const std::string png = read_file(input_image("rgb8.png"));
  write_file_atomic(dir / "cut.png", png.substr(0, png.size() - 20));
  auto first_error = [&](std::vector<std::string> second_line) {
    std::vector<ImageJob> js = {job_with_images("p.jsonl:1", {good}), job_with_images("p.jsonl:2", second_line),
                                job_with_images("p.jsonl:3", {dir / "missing-too.png"})};
    return test::input_error_of([&] { inspect_input_images(js, 2); });
  };
  std::string e = first_error({good, dir / "missing.png"});
  EXPECT_NE(e.find("p.jsonl:2: \"image\" " + dir / "missing.png"), std::string::npos) << e;
  e = first_error({dir / "zero.png"});
  EXPECT_NE(e.find("p.jsonl:2: \"image\" " + dir / "zero.png"), std::string::npos) << e;
  EXPECT_NE(e.find("character device"), std::string::npos) << e;
  e = first_error({dir / "cut.png"});
  EXPECT_NE(e.find("p.jsonl:2: \"image\" " + dir / "cut.png" + ": not a readable PNG"), std::string::npos) << e;
  e = first_error({dir.path()});
  EXPECT_NE(e.find("p.jsonl:2: \"image\" " + dir.path()), std::string::npos) << e;

  // A file replaced after the check is not silently another input.
  write_file_atomic(dir / "a.jpg", read_file(good));
  std::vector<ImageJob> js = {job_with_images("p.jsonl:1", {dir / "a.jpg"})};
  inspect_input_images(js, 1);
  EXPECT_EQ(read_input_image(js[0].images[0], "p.jsonl:1").width, 37);
  write_file_atomic(dir / "a.jpg", read_file(turned));
  e = test::input_error_of([&] { read_input_image(js[0].images[0], "p.jsonl:1"); });
  EXPECT_NE(e.find("p.jsonl:1: \"image\" " + dir / "a.jpg" + " changed during the run"), std::string::npos) << e;
}

// The text-to-image families take no input image: a line with one is refused before any
// weight is read, naming the line and the model.
TEST(InputImages, ATextToImageModelRefusesAnImageBeforeAnyWork) {
  test::TempDir dir;
  write_file_atomic(dir / "prompts.jsonl", "{\"prompt\": \"a fox\"}\n{\"prompt\": \"relight\", \"image\": \"in.png\"}\n");
  write_file_atomic(dir / "in.png", read_file(input_image("rgb8.png")));
  const auto r = test::run(fmt::format("{} generate --weights {} --out {} --width 32 --height 32 --steps 2 --prompts {}",
                                       test::exe(), test::tiny_model(), dir / "out", dir / "prompts.jsonl"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(dir / "prompts.jsonl:2: \"image\" is given, but Qwen-Image (QwenImagePipeline) makes "
                                "images from text alone"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
}

}  // namespace
}  // namespace ditbatch

// --shard auto: images that cost alike are split in blocks; edits whose input images differ in
// number or size cost differently (each adds its condition tokens to every step) and are handed
// out one at a time.
TEST(InputImages, AutoShardingIsDynamicWhenTheInputsDiffer) {
  ditbatch::ImageJob a;
  a.width = a.height = 512;
  a.steps = 40;
  a.images = {{"a.png", "a.png", "", 640, 480}};
  std::vector<ditbatch::ImageJob> same = {a, a};
  same[1].images[0].path = same[1].images[0].file = "b.png";  // another file of the same size
  EXPECT_EQ(ditbatch::resolve_shard_mode(ditbatch::ShardMode::Auto, same, false), ditbatch::ShardMode::Contiguous);
  std::vector<ditbatch::ImageJob> larger = same;
  larger[1].images[0].width = 1920;
  EXPECT_EQ(ditbatch::resolve_shard_mode(ditbatch::ShardMode::Auto, larger, false), ditbatch::ShardMode::Dynamic);
  std::vector<ditbatch::ImageJob> two = same;
  two[1].images.push_back(two[1].images[0]);
  EXPECT_EQ(ditbatch::resolve_shard_mode(ditbatch::ShardMode::Auto, two, false), ditbatch::ShardMode::Dynamic);
}
