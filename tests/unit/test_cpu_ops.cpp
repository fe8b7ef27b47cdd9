// Every CPU backend op against a float64 loop on random inputs, by normalised error.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <tuple>

#include "cpu/cpu_backend.h"
#include "selftest/op_cases.h"
#include "selftest/op_check.h"
#include "test_util.h"

using namespace ditbatch;

class CpuOps : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuOps, MatchesFloat64Reference) {
  const selftest::OpCase c = selftest::all_op_cases()[GetParam()];
  CpuBackend be;
  const selftest::OpCheck r = selftest::check_op_case(be, c);
  EXPECT_EQ(r.reference, "float64");
  EXPECT_TRUE(r.passed()) << c.name << ": " << r.failure;
}

INSTANTIATE_TEST_SUITE_P(AllOps, CpuOps, ::testing::Range<size_t>(0, selftest::all_op_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return selftest::all_op_cases()[info.param].name;
                         });

// The shared shape contract (src/core/op_shapes.h): each mistake refused, naming the op.
class CpuShapeMistakes : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuShapeMistakes, RefusedNamingTheOp) {
  const selftest::ShapeMistake mistake = selftest::all_shape_mistakes()[GetParam()];
  CpuBackend be;
  EXPECT_EQ(selftest::shape_mistake_failure(be, mistake), "");
}

INSTANTIATE_TEST_SUITE_P(AllOps, CpuShapeMistakes, ::testing::Range<size_t>(0, selftest::all_shape_mistakes().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return selftest::all_shape_mistakes()[info.param].name;
                         });

// The CPU keeps weights in f32, its one compute dtype: a bf16 tensor is widened once, at upload.
TEST(CpuOps, WeightsAreStoredInTheWeightDtype) {
  CpuBackend be;
  EXPECT_EQ(be.weight_dtype(), DType::F32);
  const Tensor f32 = test::random_tensor({8, 16}, 631);
  Tensor host = Tensor::host(f32.shape(), DType::BF16);
  convert_from_f32(f32.data<float>(), host.raw(), DType::BF16, f32.numel());
  const Tensor w = be.upload_weight(host);
  EXPECT_EQ(w.dtype(), be.weight_dtype());
  for (int64_t i = 0; i < host.numel(); ++i) ASSERT_EQ(w.data<float>()[i], host.to_f32().data<float>()[i]) << i;
}

TEST(CpuOps, CountNonfiniteFindsThePlantedValues) {
  CpuBackend be;
  for (const auto& c : selftest::nonfinite_cases()) EXPECT_EQ(be.count_nonfinite(c.host), c.expected) << c.name;
}

// Placement invariance on the CPU: the same bits whatever the thread count (every op case, plus
// GEMMs big enough to span several tiles and to make OpenBLAS thread if it were allowed to).
TEST(CpuOpsThreads, ResultsDoNotDependOnTheThreadCount) {
  std::vector<selftest::OpCase> cases = selftest::all_op_cases();
  for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{1100, 300, 700}, {1, 2000, 1500}, {40, 512, 2100}}) {
    selftest::OpCase c;
    c.name = fmt::format("linear_{}x{}x{}", M, K, N);
    c.inputs = {{test::random_tensor({M, K}, 91), selftest::InputKind::Activation},
                {test::random_tensor({N, K}, 92), selftest::InputKind::Weight},
                {test::random_tensor({N}, 93), selftest::InputKind::Weight}};
    c.run = [](Backend& be, std::vector<Tensor>& in) { return be.linear(in[0], in[1], &in[2]); };
    cases.push_back(c);
  }
  const int saved = omp_get_max_threads();
  for (const auto& c : cases) {
    std::vector<Tensor> outputs;
    for (int threads : {1, 3}) {
      omp_set_num_threads(threads);
      CpuBackend be;
      std::vector<Tensor> inputs = selftest::upload_inputs(be, c);
      outputs.push_back(be.to_host_f32(c.run(be, inputs)));
    }
    EXPECT_EQ(std::memcmp(outputs[0].raw(), outputs[1].raw(), outputs[0].nbytes()), 0) << c.name;
  }
  omp_set_num_threads(saved);
}
