// `ditbatch selftest` and the checks under it: a backend that is wrong in one op is caught and
// named; the CPU backend passes against float64 loops and diffusers' tiny pipeline; the JSON
// holds every check; the command refuses a GPU that is not there in one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "app/backends.h"
#include "cpu/cpu_backend.h"
#include "selftest/checks.h"
#include "selftest/op_cases.h"
#include "selftest/op_check.h"
#include "selftest/pipeline_check.h"
#include "test_util.h"

using namespace ditbatch;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

// The CPU backend with one deliberate fault: the kind of bug the selftest exists to catch.
class FaultyBackend final : public CpuBackend {
 public:
  enum class Fault { SiluOffByOnePart, GeluLeavesANaN, AttentionScaleOff };
  explicit FaultyBackend(Fault f) : fault_(f) {}
  Tensor silu(const Tensor& x) override {
    Tensor y = CpuBackend::silu(x);
    if (fault_ == Fault::SiluOffByOnePart) y.data<float>()[y.numel() / 2] *= 1.01f;
    return y;
  }
  Tensor gelu_tanh(const Tensor& x) override {
    Tensor y = CpuBackend::gelu_tanh(x);
    if (fault_ == Fault::GeluLeavesANaN) y.data<float>()[1] = std::nanf("");
    return y;
  }
  using CpuBackend::attention;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal, const Tensor& out,
                 int64_t spare_rows) override {
    CpuBackend::attention(q, k, v, fault_ == Fault::AttentionScaleOff ? scale * 1.02f : scale, causal, out,
                          spare_rows);
  }

 private:
  Fault fault_;
};

selftest::BackendFactory faulty(FaultyBackend::Fault f) {
  return [f](DType) -> std::unique_ptr<Backend> { return std::make_unique<FaultyBackend>(f); };
}

}  // namespace

TEST(Selftest, OpFamiliesNameTheOp) {
  EXPECT_EQ(selftest::op_family("linear_M37_K70_N19_bias"), "linear");
  EXPECT_EQ(selftest::op_family("conv2d_3x3_5x7_6to4"), "conv2d");
  EXPECT_EQ(selftest::op_family("attention_rows_Lq37_Lk50_H2_D16_row4"), "attention_rows");
  EXPECT_EQ(selftest::op_family("rope_neox_L11_H3_D16"), "rope_neox");
  EXPECT_EQ(selftest::op_family("permute_5x7x3_to_201"), "permute");
  EXPECT_EQ(selftest::op_family("clamp_"), "clamp_");
  // The quick subset has every op exactly once.
  std::set<std::string> all, quick;
  for (const auto& c : selftest::all_op_cases()) all.insert(selftest::op_family(c.name));
  for (const auto& c : selftest::quick_op_cases()) EXPECT_TRUE(quick.insert(selftest::op_family(c.name)).second) << c.name;
  EXPECT_EQ(quick, all);
  EXPECT_LT(selftest::quick_op_cases().size(), selftest::all_op_cases().size());
}

TEST(Selftest, AWrongOpFailsNamingIt) {
  selftest::Report report;
  selftest::check_ops(report, faulty(FaultyBackend::Fault::SiluOffByOnePart), {DType::F32}, true);
  EXPECT_FALSE(report.passed());
  EXPECT_EQ(report.verdict(), "FAIL: ops f32/silu") << report.table(false);
  for (const auto& row : report.checks())
    if (row.name == "silu") {
      EXPECT_NE(row.note.find("above the bound"), std::string::npos) << row.note;
    }

  selftest::Report nan;
  selftest::check_ops(nan, faulty(FaultyBackend::Fault::GeluLeavesANaN), {DType::F32}, true);
  // linear_gelu's default composition calls gelu_tanh: the fault shows there too.
  EXPECT_EQ(nan.verdict(), "FAIL: ops f32/gelu_tanh, ops f32/linear_gelu_M37_K70_N19") << nan.table(false);
  EXPECT_NE(nan.table(false).find("1 NaN/Inf (or unwritten) element(s)"), std::string::npos) << nan.table(false);

  // Every attention case fails (into rows or not), the other ops pass.
  selftest::Report attention;
  selftest::check_ops(attention, faulty(FaultyBackend::Fault::AttentionScaleOff), {DType::F32}, false);
  for (const auto& row : attention.checks())
    if (row.group == "ops f32") {
      EXPECT_EQ(row.status == selftest::Status::Fail, row.name.rfind("attention", 0) == 0) << row.name << ": " << row.note;
    }
}

TEST(Selftest, TheCpuPassesAgainstFloat64AndDiffusers) {
  selftest::Report report;
  const selftest::BackendFactory cpu = [](DType) -> std::unique_ptr<Backend> { return std::make_unique<CpuBackend>(); };
  selftest::check_ops(report, cpu, {DType::F32}, false);
  selftest::PipelineCheckOptions o;
  o.goldens = test::golden("");
  selftest::check_pipelines(report, cpu, DType::F32, o, Log::quiet());
  EXPECT_TRUE(report.passed()) << report.table(false);
  int64_t ops = 0, tiny = 0, diffusers = 0, edit = 0;
  for (const auto& row : report.checks()) {
    EXPECT_EQ(row.status, selftest::Status::Pass) << row.group << "/" << row.name << ": " << row.note;
    ops += row.group == "ops f32";
    tiny += row.group == "pipeline f32 (tiny model)";
    // The Edit families' check: one job each, from a synthetic input image.
    edit += row.group.starts_with("pipeline f32 (tiny qwen-image-edit");
    diffusers += row.group == "pipeline f32 (diffusers)";
  }
  EXPECT_EQ(ops, std::ssize(selftest::all_op_cases()));
  EXPECT_EQ(tiny, 2);
  EXPECT_EQ(edit, 3);
  EXPECT_EQ(diffusers, 4);
}

// The tiny model's rows compare the CPU with itself (at one thread): only diffusers' outputs
// can show a wrong CPU backend, and they do.
TEST(Selftest, DiffusersOutputsCatchAWrongPipeline) {
  selftest::Report report;
  selftest::PipelineCheckOptions o;
  o.goldens = test::golden("");
  o.quick = true;
  o.models = {"qwen-image"};  // the diffusers rows are the point; the other families' tiny rows are as this one's
  selftest::check_pipelines(report, faulty(FaultyBackend::Fault::AttentionScaleOff), DType::F32, o, Log::quiet());
  int64_t failed = 0;
  for (const auto& row : report.checks()) {
    if (row.group == "pipeline f32 (diffusers)") {
      EXPECT_EQ(row.status, selftest::Status::Fail) << row.name;
      EXPECT_NE(row.note.find("latents nmse"), std::string::npos) << row.note;
      ++failed;
    } else {
      EXPECT_EQ(row.status, selftest::Status::Pass) << row.group << "/" << row.name << ": " << row.note;
    }
  }
  EXPECT_EQ(failed, 2);
}

TEST(Selftest, CommandPassesOnTheCpuWithItsJson) {
  TempDir dir;
  // One family's tiny pipeline: every family's is TheCpuPassesAgainstFloat64AndDiffusers's.
  auto r = test::run(
      fmt::format("{} selftest --backend cpu --models qwen-image --json {}", test::exe(), dir / "selftest.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("\nPASS ("), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(test::read_text(dir / "selftest.json"));
  ASSERT_EQ(j["ranks"].size(), 1u);
  const auto& rank = j["ranks"][0];
  EXPECT_TRUE(rank["passed"].get<bool>());
  std::set<std::string> rows;
  for (const auto& c : rank["report"]["checks"]) {
    rows.insert(c["group"].get<std::string>() + "/" + c["name"].get<std::string>());
    EXPECT_EQ(c["status"], "PASS") << c.dump();
  }
  for (const auto& c : selftest::all_op_cases()) EXPECT_TRUE(rows.count("ops f32/" + c.name)) << c.name;
  for (const auto& m : selftest::all_shape_mistakes()) EXPECT_TRUE(rows.count("ops f32 shape checks/" + m.name)) << m.name;
  std::set<std::string> metrics;
  for (const auto& m : rank["report"]["measurements"]) {
    EXPECT_GT(m["value"].get<double>(), 0) << m.dump();
    metrics.insert(m["metric"].get<std::string>());
  }
  EXPECT_EQ(metrics, (std::set<std::string>{"gemm", "copy", "gemm_model", "attention"}));
  EXPECT_GT(rank["gemm"].get<double>(), 0);
  EXPECT_EQ(rank["report"]["environment"]["backend"], "cpu");
}

// A --tokenizer that is none skipped the pipeline checks and still said PASS; OMP_NUM_THREADS was
// ignored (generate honours it): the tokenizer is now checked first (exit 2, naming the file),
// and the threads are generate's.
TEST(Selftest, ATokenizerGivenByNameMustBeOneAndOmpNumThreadsCounts) {
  TempDir dir;
  fs::copy(test::golden("tiny-pipeline/tokenizer"), dir / "tok", fs::copy_options::recursive);
  fs::remove(dir / "tok/added_tokens.json");
  auto r = test::run(fmt::format("{} selftest --quick --backend cpu --no-measure --tokenizer {}", test::exe(), dir / "tok"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find((dir / "tok") + "/added_tokens.json: missing"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("PASS"), std::string::npos) << r.output;
  test::write_text(dir / "tok/added_tokens.json", "{\"<|endoftext|>\": 3}");  // an id the vocabulary gives another
  r = test::run(fmt::format("{} selftest --quick --backend cpu --no-measure --tokenizer {}", test::exe(), dir / "tok"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find((dir / "tok") + "/added_tokens.json"), std::string::npos) << r.output;

  r = test::run(fmt::format("OMP_NUM_THREADS=1 {} selftest --quick --backend cpu --no-measure --models qwen-image --json {}",
                            test::exe(), dir / "one.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(test::read_text(dir / "one.json"));
  const std::string cpu = j["ranks"][0]["report"]["environment"]["cpu"].get<std::string>();
  EXPECT_NE(cpu.find(", 1 threads used"), std::string::npos) << cpu;
}

// --models: the tiny pipelines of those families alone (the CPU emulation of CUDA checks the
// text-to-image ones); a name make-tiny does not write is refused before any check runs.
TEST(Selftest, ModelsChoosesTheTinyPipelinesChecked) {
  auto r = test::run(fmt::format("{} selftest --quick --backend cpu --no-measure --goldens none --models qwen-image-2.1",
                                 test::exe()));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("(tiny qwen-image-2.1 model) PASS"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("(tiny model)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("qwen-image-edit"), std::string::npos) << r.output;
  r = test::run(fmt::format("{} selftest --quick --backend cpu --no-measure --models qwen-image,sdxl", test::exe()));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--models: 'sdxl' (expected some of qwen-image, qwen-image-2.1, qwen-image-edit"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("ops f32"), std::string::npos) << r.output;
}

TEST(Selftest, CudaWithoutAGpuSaysSoInOneLine) {
  if (visible_gpu_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  auto r = test::run(test::exe() + " selftest --backend cuda --quick");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_EQ(r.output.rfind("FAIL: --backend cuda: ", 0), 0u) << r.output;
}
