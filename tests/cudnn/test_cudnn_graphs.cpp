// The cuDNN graphs the CUDA backend builds (kernels/cudnn_graph.cpp), checked on a machine
// without a GPU: cuDNN finalizes every tensor and operation (validating layouts, types and
// shapes), then its heuristics, told the device is an H200 through a device-properties JSON
// (cuDNN >= 9.8 "deviceless" mode), must offer an engine that passes its support checks for
// sm_90. The same functions build the graphs on the GPU, so a graph cuDNN would refuse fails
// here in CI instead of in the few minutes a GPU is lent. Execution is the GPU's job
// (tests/unit/test_cuda_ops.cpp).
//
// ctest runs this binary with a stub libcuda.so.1 first on LD_LIBRARY_PATH: the runtime-compiled
// engines check that the driver library loads (nothing here calls the driver).
//
// A build against older cuDNN headers has less to check, and says so: before 9.8 no deviceless
// heuristics (those tests skip), before 9.13 no SDPA operation (its test skips, and the SDPA
// path must be off with the reason: CudnnSdpa.*). tools/ci/cuda_portability.sh builds this
// file against the cuDNN 9.1 headers and library and runs it.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "attention_cudnn.h"
#include "conv_cudnn.h"
#include "cudnn_graph.h"

using namespace ditbatch;
using namespace ditbatch::cuda;

namespace {

constexpr size_t kDevicelessVersion = 90800;
const std::string kHeaders = fmt::format("{}.{}.{}", CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);

std::string h200_json() {
  const std::string path = std::string(DITBATCH_TEST_DATA) + "/cudnn/h200_device_properties.json";
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

#define SKIP_WITHOUT_DEVICELESS_CUDNN()                                                                      \
  if (!cudnn::deviceless_compiled())                                                                          \
    GTEST_SKIP() << "built against cuDNN " << kHeaders << " headers: no deviceless heuristics (needs 9.8.0)";  \
  if (cudnnGetVersion() < kDevicelessVersion)                                                                 \
  GTEST_SKIP() << "cuDNN " << cudnnGetVersion() << " has no deviceless heuristics (needs >= 9.8)"

// Heuristics for an H200 (and with finalize, an execution plan for it); returns the plan or
// fails the test with cuDNN's reason.
std::unique_ptr<cudnn::Plan> heuristics_on_h200(cudnn::Graph graph, bool finalize = false) {
  const cudnn::Desc props = cudnn::device_properties(h200_json());
  const std::string name = graph.name;
  try {
    auto plan = cudnn::make_plan(std::move(graph), nullptr, &props, finalize);
    std::printf("[cudnn] %s: %lld engine configs, %lld usable on sm_90%s\n", name.c_str(),
                static_cast<long long>(plan->engine_configs), static_cast<long long>(plan->usable_configs),
                finalize ? fmt::format(", plan finalized (workspace {} B)", plan->workspace).c_str() : "");
    return plan;
  } catch (const cudnn::Failure& e) {
    ADD_FAILURE() << name << ": " << e.what();
    return nullptr;
  }
}

}  // namespace

TEST(CudnnGraphs, DevicePropertiesOfAnH200AreAccepted) {
  SKIP_WITHOUT_DEVICELESS_CUDNN();
  EXPECT_NO_THROW(cudnn::device_properties(h200_json()));
  // and a malformed description is refused (the check above can fail)
  EXPECT_THROW(cudnn::device_properties("{\"deviceVer\": \"not a number\""), cudnn::Failure);
}

// The transformer's joint attention at 1024x1024 (4096 image + 20 text tokens) and the CUDA
// tests' shapes.
TEST(CudnnGraphs, SdpaHasAnEngineForTheDitShapesOnH200) {
  if (!cudnn::sdpa_compiled())
    GTEST_SKIP() << "built against cuDNN " << kHeaders
                 << " headers: the SDPA operation is compiled out (attention takes the GEMM path; CudnnSdpa.* checks it)";
  SKIP_WITHOUT_DEVICELESS_CUDNN();
  if (cudnnGetVersion() < 91301) GTEST_SKIP() << "cuDNN " << cudnnGetVersion() << " predates the unified SDPA op";
  const int64_t shapes[][4] = {{4116, 4116, 24, 128}, {4116, 4108, 24, 128}, {1044, 1044, 24, 128},
                               {333, 317, 4, 128},    {160, 150, 24, 128},   {129, 65, 2, 64}};
  for (const auto& s : shapes) {
    auto plan = heuristics_on_h200(cudnn::sdpa_graph(s[0], s[1], s[2], s[3]));
    ASSERT_TRUE(plan);
    EXPECT_GE(plan->usable_configs, 1);
  }
}

// The VAE decoder's 3x3 convolutions of Qwen-Image at 1024x1024 (channels 16 -> 384 at the
// latent 128x128, 384/192/96 further up) and the op tests' shape. Their engines are
// precompiled, so the execution plan itself finalizes for an H200 here too.
TEST(CudnnGraphs, ConvolutionWithBiasHasAnEngineForTheVaeShapesOnH200) {
  SKIP_WITHOUT_DEVICELESS_CUDNN();
  const int64_t shapes[][4] = {{128, 128, 16, 384}, {128, 128, 384, 384}, {256, 256, 384, 192},
                               {512, 512, 192, 192}, {1024, 1024, 192, 96}, {1024, 1024, 96, 96}, {16, 9, 16, 8}};
  for (const auto& s : shapes) {
    auto plan = heuristics_on_h200(cudnn::conv3x3_bias_graph(s[0], s[1], s[2], s[3], DType::BF16), /*finalize=*/true);
    ASSERT_TRUE(plan);
    EXPECT_GE(plan->usable_configs, 1);
    EXPECT_TRUE(plan->plan.get() != nullptr);
    EXPECT_GE(plan->workspace, 0);
  }
}

// Negative control: the graph builders' validation is real. A convolution whose output has
// fewer channels than the filter makes is refused when the product's convolution builder
// finalizes the operation; the same builder accepts a consistent output.
TEST(CudnnGraphs, AnInconsistentConvolutionIsRefused) {
  cudnn::Desc x = cudnn::tensor({1, CUDNN_DATA_BFLOAT16, {1, 16, 8, 8}, {1024, 1, 128, 16}});
  cudnn::Desc w = cudnn::tensor({2, CUDNN_DATA_BFLOAT16, {32, 16, 3, 3}, {144, 1, 48, 16}});
  cudnn::Desc y = cudnn::tensor({3, CUDNN_DATA_FLOAT, {1, 24, 8, 8}, {1536, 1, 192, 24}});  // 24 != 32
  EXPECT_THROW(cudnn::conv3x3_forward(x, w, y), cudnn::Failure);
  // The same builder with a y that fits: finalizes (the refusal above is about the shapes).
  cudnn::Desc y_ok = cudnn::tensor({3, CUDNN_DATA_FLOAT, {1, 32, 8, 8}, {2048, 1, 256, 32}});
  EXPECT_NO_THROW(cudnn::conv3x3_forward(x, w, y_ok));
}

// The SDPA path's state from the start, in any build: with headers older than 9.13.0 it is off
// and says why (so `auto` takes the GEMM path and the backend's log names the reason); with
// newer headers it is on exactly when the cuDNN loaded is 9.13.1 or newer and built for this
// CUDA major. The expected texts are written out from the headers' own version macros.
TEST(CudnnSdpa, IsOffWithTheReasonExactlyWhenItCannotRun) {
  cuda::CudnnSdpa sdpa;
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  const bool header_has_op = CUDNN_VERSION >= 91300;
  EXPECT_EQ(cudnn::sdpa_compiled(), header_has_op);
  if (!header_has_op) {
    const std::string expected = fmt::format(
        "disabled: cuDNN SDPA is not compiled in: this build's cuDNN headers are {}.{}.{}, it needs 9.13.0 or newer "
        "(rebuild against them)",
        CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
    EXPECT_EQ(sdpa.status(), expected);
    EXPECT_TRUE(sdpa.disabled());
    try {
      cudnn::sdpa_graph(64, 64, 2, 64);
      ADD_FAILURE() << "sdpa_graph built a graph in a build without the SDPA operation";
    } catch (const cudnn::Failure& e) {
      EXPECT_NE(std::string(e.what()).find("not compiled in"), std::string::npos) << e.what();
    }
    std::printf("[cudnn] SDPA path: %s\n", sdpa.status().c_str());
    return;
  }
  const bool usable = cudnnGetVersion() >= 91301 && cudnnGetCudartVersion() / 1000 == static_cast<size_t>(runtime) / 1000;
  EXPECT_EQ(!sdpa.disabled(), usable) << sdpa.status();
  EXPECT_EQ(sdpa.status().rfind(usable ? "available" : "disabled: ", 0), 0u) << sdpa.status();
  std::printf("[cudnn] SDPA path: %s\n", sdpa.status().c_str());
}

// The convolution path needs nothing newer than cuDNN 9.0: on in every build whose cuDNN was
// built for this process's CUDA major.
TEST(CudnnConv, IsOnWheneverTheCudnnLoadedMatchesTheCudaMajor) {
  cuda::CudnnConv conv;
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  const bool usable = cudnnGetCudartVersion() / 1000 == static_cast<size_t>(runtime) / 1000;
  EXPECT_EQ(!conv.disabled(), usable) << conv.status();
  std::printf("[cudnn] convolution path: %s\n", conv.status().c_str());
}
