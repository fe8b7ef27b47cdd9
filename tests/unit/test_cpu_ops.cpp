// Every CPU backend op against a float64 loop on random inputs, by normalised error.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <tuple>

#include "cpu/cpu_backend.h"
#include "op_cases.h"
#include "test_util.h"

using namespace ditbatch;

class CpuOps : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuOps, MatchesFloat64Reference) {
  const test::OpCase c = test::all_op_cases()[GetParam()];
  SCOPED_TRACE(c.name);
  CpuBackend be;
  std::vector<Tensor> inputs = test::upload_inputs(be, c);
  Tensor out = be.to_host_f32(c.run(be, inputs));
  std::vector<Tensor> host;
  for (const auto& in : c.inputs) host.push_back(in.host);
  std::vector<double> ref = c.reference(host);
  ASSERT_EQ(out.numel(), static_cast<int64_t>(ref.size()));
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(std::isfinite(out.data<float>()[i])) << "element " << i;
    const double d = out.data<float>()[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  ASSERT_GT(den, 0.0) << "the reference is all zeros: the case cannot fail";
  EXPECT_LE(num / den, c.nmse_bound) << "nmse " << num / den;
}

INSTANTIATE_TEST_SUITE_P(AllOps, CpuOps, ::testing::Range<size_t>(0, test::all_op_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return test::all_op_cases()[info.param].name;
                         });

// The shared shape contract (src/core/op_shapes.h): each mistake refused, naming the op.
class CpuShapeMistakes : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuShapeMistakes, RefusedNamingTheOp) {
  const test::ShapeMistake mistake = test::all_shape_mistakes()[GetParam()];
  CpuBackend be;
  EXPECT_EQ(test::shape_mistake_failure(be, mistake), "");
}

INSTANTIATE_TEST_SUITE_P(AllOps, CpuShapeMistakes, ::testing::Range<size_t>(0, test::all_shape_mistakes().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return test::all_shape_mistakes()[info.param].name;
                         });

TEST(CpuOps, CountNonfiniteFindsThePlantedValues) {
  CpuBackend be;
  for (const auto& c : test::nonfinite_cases()) EXPECT_EQ(be.count_nonfinite(c.host), c.expected) << c.name;
}

// Placement invariance on the CPU: the same bits whatever the thread count (every op case, plus
// GEMMs big enough to span several tiles and to make OpenBLAS thread if it were allowed to).
TEST(CpuOpsThreads, ResultsDoNotDependOnTheThreadCount) {
  std::vector<test::OpCase> cases = test::all_op_cases();
  for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{1100, 300, 700}, {1, 2000, 1500}, {40, 512, 2100}}) {
    test::OpCase c;
    c.name = fmt::format("linear_{}x{}x{}", M, K, N);
    c.inputs = {{test::random_tensor({M, K}, 91), test::InputKind::Activation},
                {test::random_tensor({N, K}, 92), test::InputKind::Weight},
                {test::random_tensor({N}, 93), test::InputKind::Weight}};
    c.run = [](Backend& be, std::vector<Tensor>& in) { return be.linear(in[0], in[1], &in[2]); };
    cases.push_back(c);
  }
  const int saved = omp_get_max_threads();
  for (const auto& c : cases) {
    std::vector<Tensor> outputs;
    for (int threads : {1, 3}) {
      omp_set_num_threads(threads);
      CpuBackend be;
      std::vector<Tensor> inputs = test::upload_inputs(be, c);
      outputs.push_back(be.to_host_f32(c.run(be, inputs)));
    }
    EXPECT_EQ(std::memcmp(outputs[0].raw(), outputs[1].raw(), outputs[0].nbytes()), 0) << c.name;
  }
  omp_set_num_threads(saved);
}
