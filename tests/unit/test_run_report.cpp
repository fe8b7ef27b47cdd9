// The run report's data (pipeline/run_report) from folders as ditbatch leaves them, including
// manifests of an older ditbatch (no run id, no start time), the times it reads, and the
// escaping of its data block. The page itself is tested in Chromium (tests/report).
#include <gtest/gtest.h>

#include "core/wall_clock.h"
#include "io/run_record.h"
#include "pipeline/report_page.h"
#include "pipeline/run_report.h"
#include "test_util.h"

using namespace ditbatch;
using nlohmann::json;
using test::TempDir;

// Epochs by Python: datetime(2026, 12, 1, 13, 44, 52, 123000, tzinfo=timezone.utc).timestamp().
TEST(RunReport, UtcTimesReadAsPythonReadsThem) {
  EXPECT_DOUBLE_EQ(*parse_utc_iso("2026-12-01T13:44:52.123Z"), 1796132692.123);
  EXPECT_DOUBLE_EQ(*parse_utc_iso("2024-02-29T23:59:59Z"), 1709251199.0);
  EXPECT_EQ(utc_iso(1796132692.123), "2026-12-01T13:44:52.123Z");
  EXPECT_EQ(utc_iso(1796132692.9996), "2026-12-01T13:44:53.000Z");  // rounds into the next second
  EXPECT_EQ(utc_iso(1709251199.0, false), "2024-02-29T23:59:59Z");
  for (const char* bad : {"", "2026-12-01", "2026-12-01T13:44:52", "2026-13-01T13:44:52Z", "2026-12-01T13:44:52.1Z",
                          "2026-12-01T13:44:52.123Zjunk", "2026-12-01T-1:44:52Z"})
    EXPECT_FALSE(parse_utc_iso(bad).has_value()) << bad;
}

TEST(RunReport, TheDataBlockHoldsNoMarkupAndReadsBackAsWritten) {
  const std::string hostile = "</script><script>alert(1)</script><!-- &amp; \"quoted\" \xe6\x9d\xb1\xe4\xba\xac";
  const json value = {{"prompt", hostile}, {"list", {hostile, 1, 2.5}}};
  const std::string text = json_for_html_script(value);
  EXPECT_EQ(text.find_first_of("<>&"), std::string::npos) << text;
  EXPECT_EQ(json::parse(text), value);
  // Invalid UTF-8 (a hand-edited manifest) becomes U+FFFD instead of ending the report.
  EXPECT_EQ(json::parse(json_for_html_script(json("a\xff" "b"))).get<std::string>(), "a\xef\xbf\xbd" "b");
  const std::string page = render_report_page({{"folder", hostile}});
  EXPECT_EQ(page.find("</script><script>alert"), std::string::npos);
  EXPECT_EQ(page.find("/*DITBATCH_REPORT_DATA*/"), std::string::npos);
}

// Two runs written by hand as ditbatch writes them: run A (2 ranks, 10 minutes, 3 images made,
// one failed), and lines of an older ditbatch (no run id, no start, whole-second finish).
TEST(RunReport, RunsLanesAndRatesFromTheManifestAndTheRunRecords) {
  TempDir dir;
  auto line = [](int64_t index, const char* status, json extra) {
    json j = {{"index", index},  {"prompt", fmt::format("prompt {}", index)}, {"negative_prompt", " "},
              {"seed", 18446744073709551615ull}, {"width", 64}, {"height", 48}, {"steps", 4}, {"cfg", 4.0},
              {"file", fmt::format("{:06d}.png", index)}, {"status", status}, {"model", "tiny"},
              {"model_checksum", "abc123"}};
    j.update(extra);
    return j.dump() + "\n";
  };
  const json timings = {{"text_encoder_s", 1.0}, {"transformer_s", 10.0}, {"vae_s", 2.0}, {"total_s", 14.0},
                        {"write_s", 0.5}};
  std::string manifest;
  manifest += line(0, "ok", {{"run_id", "A"}, {"rank", 0}, {"host", "n1"}, {"started", "2026-12-01T14:01:00.000Z"},
                             {"timings", timings}});
  manifest += line(1, "ok", {{"run_id", "A"}, {"rank", 1}, {"host", "n2"}, {"started", "2026-12-01T14:02:00.000Z"},
                             {"timings", timings}});
  manifest += line(2, "failed", {{"run_id", "A"}, {"rank", 1}, {"host", "n2"}, {"started", "2026-12-01T14:03:00.000Z"},
                                 {"timings", timings}, {"error", "cannot write the output: x"}});
  // an older ditbatch: timings without write_s, finished at whole seconds, no run id
  manifest += line(3, "ok", {{"rank", 0}, {"host", "old"}, {"finished", "2026-11-30T10:00:20Z"},
                             {"timings", {{"text_encoder_s", 1.0}, {"transformer_s", 15.0}, {"vae_s", 4.0},
                                          {"total_s", 20.0}}}});
  test::write_text(dir / "manifest.jsonl", manifest);
  for (int rank : {0, 1})
    write_run_record(dir.path(), {{"run_id", "A"}, {"rank", rank}, {"host", rank ? "n2" : "n1"}, {"backend", "cpu"},
                                  {"version", "ditbatch 0.1.0 (test)"}, {"images", 4},
                                  {"started", "2026-12-01T14:00:00.000Z"}, {"loaded", "2026-12-01T14:00:30.000Z"},
                                  {"ended", "2026-12-01T14:10:00.000Z"}, {"done", rank ? 1 : 2},
                                  {"skipped", 0}, {"failed", rank}, {"stopped_by_signal", false}});
  // Another tool's file in .runs, and a torn one: ignored.
  test::write_text(dir / ".runs/notes.json", "[1, 2]");
  test::write_text(dir / ".runs/torn-rank00000.json", "{\"run_id\": \"B\", \"ra");

  const json r = collect_run_report(dir.path());
  ASSERT_EQ(r["images"].size(), 4u);
  EXPECT_EQ(r["totals"]["ok"], 3);
  EXPECT_EQ(r["totals"]["failed"], 1);
  ASSERT_EQ(r["runs"].size(), 2u);
  // Oldest first: the older ditbatch's lines (2026-11-30), then run A.
  const json& old = r["runs"][0];
  const json& a = r["runs"][1];
  EXPECT_EQ(old["id"], "");
  EXPECT_EQ(a["id"], "A");
  // The old line's start is its finish less its time: 10:00:20 - 20 s.
  const double old_start = 1796032800.0;  // Python: datetime(2026, 11, 30, 10, 0, 0, tzinfo=utc).timestamp()
  EXPECT_DOUBLE_EQ(old["start"].get<double>(), old_start);
  EXPECT_DOUBLE_EQ(old["wall_s"].get<double>(), 20.0);
  EXPECT_EQ(old["done"], 1);
  EXPECT_FALSE(old["recorded"].get<bool>());
  // Run A: 14:00:00 to 14:10:00 on 2 ranks, 3 made -> 3 / (600 s * 2 ranks) = 9 images/hour/GPU.
  EXPECT_DOUBLE_EQ(a["wall_s"].get<double>(), 600.0);
  EXPECT_EQ(a["ranks"], 2);
  EXPECT_EQ(a["done"], 3);
  EXPECT_EQ(a["failed"], 1);
  EXPECT_TRUE(a["ended"].get<bool>());
  EXPECT_DOUBLE_EQ(a["images_per_hour_per_gpu"].get<double>(), 9.0);
  ASSERT_EQ(a["lanes"].size(), 2u);
  EXPECT_EQ(a["lanes"][1]["host"], "n2");
  EXPECT_EQ(a["lanes"][1]["images"], 2);
  EXPECT_DOUBLE_EQ(a["lanes"][0]["loaded"].get<double>() - a["lanes"][0]["started"].get<double>(), 30.0);
  // Over both: (3 + 1) made in (600 * 2 + 20 * 1) GPU-seconds.
  EXPECT_DOUBLE_EQ(r["totals"]["images_per_hour_per_gpu"].get<double>(), 4.0 / (1220.0 / 3600.0));
  // The seed stays exact as text (the page's numbers hold 53 bits).
  const auto& columns = r["columns"];
  const auto col = [&](const char* name) { return std::find(columns.begin(), columns.end(), name) - columns.begin(); };
  EXPECT_EQ(r["images"][0][col("seed")], "18446744073709551615");
  EXPECT_EQ(r["images"][2][col("error")], "cannot write the output: x");
  // Text-to-image: no column of input images, and rows as long as the columns.
  EXPECT_EQ(std::find(columns.begin(), columns.end(), "inputs"), columns.end());
  EXPECT_EQ(r["images"][0].size(), columns.size());
  // Shared settings are in the header; the per-stage statistics are over the images made.
  EXPECT_EQ(r["shared"]["steps"], 4);
  EXPECT_EQ(r["shared"]["negative_prompt"], " ");
  EXPECT_EQ(r["stages"]["denoise"]["count"], 3);  // the failed image's times are not counted
  EXPECT_DOUBLE_EQ(r["stages"]["denoise"]["mean"].get<double>(), (10.0 + 10.0 + 15.0) / 3);
  EXPECT_DOUBLE_EQ(r["stages"]["denoise"]["median"].get<double>(), 10.0);
  EXPECT_EQ(r["stages"]["write"]["count"], 2);
}

TEST(RunReport, AFolderWithNothingYetStillGivesAPage) {
  TempDir dir;
  test::write_text(dir / "manifest.jsonl", "");
  const std::string path = write_run_report(dir.path());
  EXPECT_EQ(path, dir / "report.html");
  const std::string page = test::read_text(path);
  EXPECT_NE(page.find("<!doctype html>"), std::string::npos);
  EXPECT_NE(page.find("\"images\":[]"), std::string::npos);
}
