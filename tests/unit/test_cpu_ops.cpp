// Every CPU backend op against a float64 loop on random inputs, by normalised error.
#include <gtest/gtest.h>

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
