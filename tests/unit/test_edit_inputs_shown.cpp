// An edit's input images after the run: `ditbatch verify` names each one changed or gone since
// its image was made (the outputs still verify), and the report shows each input beside its
// output, linked from the report's folder. Made by the real `ditbatch generate` on a tiny
// Edit-2511 weight file converted with `ditbatch convert`.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/sha256.h"
#include "test_util.h"

using namespace ditbatch;
using test::TempDir;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool says(const std::string& output, const std::string& text) { return output.find(text) != std::string::npos; }

// tiny-pipeline/ with tiny-pipeline-edit-2511/ laid over it, converted by the command line.
std::string edit_weights(const TempDir& dir) {
  const std::string folder = dir / "edit-2511";
  fs::copy(test::golden("tiny-pipeline"), folder, fs::copy_options::recursive);
  fs::copy(test::golden("tiny-pipeline-edit-2511"), folder,
           fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  const std::string weights = dir / "edit.h5";
  const auto r = test::run(fmt::format("{} convert --from {} --to {}", test::exe(), folder, weights));
  EXPECT_EQ(r.status, 0) << r.output;
  return weights;
}

std::string line(const std::string& name, const json& image) {
  return json{{"prompt", "make the sky " + name}, {"width", 64}, {"height", 48}, {"steps", 2},
              {"name", name},                    {"image", image}}
             .dump() +
         "\n";
}

std::string sha256_of(const std::string& path) { return sha256_hex(test::read_text(path)); }

// The data the page's script reads, from its data block.
json data_of_page(const std::string& page) {
  const std::string open = R"(<script type="application/json" id="report-data">)";
  const size_t begin = page.find(open);
  if (begin == std::string::npos) return nullptr;
  const size_t from = begin + open.size();
  return json::parse(page.substr(from, page.find("</script>", from) - from));
}

}  // namespace

TEST(EditInputsShown, VerifyNamesChangedAndMissingInputsAndTheReportShowsThemBesideTheOutput) {
  TempDir dir;
  const std::string weights = edit_weights(dir);
  // Two inputs beside the prompt file (relative paths), one elsewhere by its absolute path.
  fs::create_directories(dir / "prompts/pictures");
  fs::create_directories(dir / "elsewhere");
  fs::copy_file(test::golden("input_images/q90_420.jpg"), dir / "prompts/pictures/a.jpg");
  fs::copy_file(test::golden("input_images/rgb8.png"), dir / "prompts/pictures/b.png");
  fs::copy_file(test::golden("input_images/q75_422.jpg"), dir / "elsewhere/c.jpg");
  const std::string a = dir / "prompts/pictures/a.jpg";
  const std::string b = dir / "prompts/pictures/b.png";
  const std::string c = dir / "elsewhere/c.jpg";
  const std::string a_then = sha256_of(a);
  test::write_text(dir / "prompts/edits.jsonl", line("one", "pictures/a.jpg") +
                                                    line("two", json::array({"pictures/a.jpg", "pictures/b.png"})) +
                                                    line("three", c));
  const std::string out = dir / "out";
  auto r = test::run(fmt::format("{} generate --weights {} --out {} --prompts {}", test::exe(), weights, out,
                                 dir / "prompts/edits.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;

  // From another current folder, every input is found where the run read it.
  const std::string verify = fmt::format("cd / && {} verify {}", test::exe(), out);
  r = test::run(verify);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(says(r.output, "3 of 3 image(s) listed as made match their sha256; 4 of 4 input image(s) unchanged\n"))
      << r.output;

  // a.jpg gets other bytes, b.png is removed.
  test::write_text(a, test::read_text(a) + "x");
  const std::string a_now = sha256_of(a);
  ASSERT_NE(a_now, a_then);
  fs::remove(b);
  r = test::run(verify);
  EXPECT_EQ(r.status, 0) << r.output;  // the images themselves are still what was made
  const std::string changed = fmt::format("input image pictures/a.jpg ({}): changed: its bytes (sha256 {}) differ "
                                          "from those recorded ({})",
                                          a, a_now.substr(0, 12), a_then.substr(0, 12));
  EXPECT_TRUE(says(r.output, fmt::format("{}: image 0: {}\n", out, changed))) << r.output;
  EXPECT_TRUE(says(r.output, fmt::format("{}: image 1: {}\n", out, changed))) << r.output;
  EXPECT_TRUE(says(r.output, fmt::format("{}: image 1: input image pictures/b.png ({}): missing\n", out, b)))
      << r.output;
  EXPECT_FALSE(says(r.output, "c.jpg")) << r.output;  // unchanged: not named
  EXPECT_TRUE(says(r.output, "3 of 3 image(s) listed as made match their sha256; 1 of 4 input image(s) unchanged "
                             "(2 changed, 1 missing)\n"))
      << r.output;

  // The report page `report` writes: each edit's inputs, as recorded and linked from out/, in its
  // gallery row beside its output's file.
  r = test::run(fmt::format("cd / && {} report {}", test::exe(), out));
  ASSERT_EQ(r.status, 0) << r.output;
  const json report = data_of_page(test::read_text(out + "/report.html"));
  ASSERT_TRUE(report.is_object()) << "no data block in report.html";
  const json& columns = report["columns"];
  const auto col = [&](const char* name) {
    return static_cast<size_t>(std::find(columns.begin(), columns.end(), name) - columns.begin());
  };
  ASSERT_LT(col("inputs"), columns.size());
  std::map<std::string, json> inputs_of;
  for (const json& row : report["images"]) inputs_of[row[col("file")].get<std::string>()] = row[col("inputs")];
  EXPECT_EQ(inputs_of["one.png"], json::parse(R"([["pictures/a.jpg", "../prompts/pictures/a.jpg"]])"));
  EXPECT_EQ(inputs_of["two.png"], json::parse(R"([["pictures/a.jpg", "../prompts/pictures/a.jpg"],
                                                  ["pictures/b.png", "../prompts/pictures/b.png"]])"));
  EXPECT_EQ(inputs_of["three.png"], json::array({json::array({c, "../elsewhere/c.jpg"})}));
}
