// What the binary says about its CUDA build and this machine (kernels/cuda_device.h): the
// driver check as a pure function over (built, driver) versions, the version names, the build
// facts against what CMake found (a second reading of the same toolkit and headers), the paths
// without a driver (`--backend auto` falls back, `--backend cuda` and the backend refuse with
// the reason), and `ditbatch --version`. A driver too old for the toolkit cannot be produced on
// a machine without a GPU: its text is held by the pure function's tests.
#include <gtest/gtest.h>

#include <sstream>

#include "test_util.h"

#ifndef DITBATCH_HAVE_CUDA

TEST(CudaDevice, VersionSaysTheBuildHasNoCuda) {
  const auto r = ditbatch::test::run(ditbatch::test::exe() + " --version");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("\nCUDA backend: not built"), std::string::npos) << r.output;
}

#else

#include <cuda_runtime.h>

#include "app/backends.h"
#include "core/error.h"
#include "cuda_backend.h"
#include "cuda_device.h"

using namespace ditbatch;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// "13.0.88" -> "13.0": CMake's reading of nvcc --version, the toolkit's own number.
std::string major_minor(const std::string& version) {
  const size_t second_dot = version.find('.', version.find('.') + 1);
  return version.substr(0, second_dot);
}

int driver_version() {
  int v = 0;
  return cudaDriverGetVersion(&v) == cudaSuccess ? v : 0;
}

}  // namespace

TEST(CudaDriver, ACuda13BinaryOnACuda12Point4DriverIsRefusedInOneLine) {
  EXPECT_EQ(cuda_driver_problem(13000, 12040),
            "this ditbatch was built with CUDA 13.0, the driver supports CUDA 12.4: rebuild it with the cluster's "
            "CUDA 12 toolkit (module load cuda/12.x, 12.4 or newer), or run it where the driver supports CUDA 13.0 "
            "(the 580 series or newer)");
  EXPECT_EQ(cuda_driver_problem(13020, 12080).find('\n'), std::string::npos);
}

TEST(CudaDriver, ACuda12Point4BinaryRunsOnEveryCuda12Or13Driver) {
  EXPECT_EQ(cuda_driver_problem(12040, 13000), "");
  EXPECT_EQ(cuda_driver_problem(12040, 12040), "");
  EXPECT_EQ(cuda_driver_problem(12040, 12080), "");
  EXPECT_EQ(cuda_driver_problem(13000, 13020), "");
  // minor-version compatibility: a 12.8 build on a 12.2 driver (no PTX of ours is JIT-compiled
  // on the GPUs it has SASS for)
  EXPECT_EQ(cuda_driver_problem(12080, 12020), "");
}

TEST(CudaDriver, NoDriverMeansNoGpu) {
  EXPECT_EQ(cuda_driver_problem(13000, 0), "no CUDA driver on this machine (no GPU)");
  EXPECT_EQ(cuda_driver_problem(12040, 0), "no CUDA driver on this machine (no GPU)");
}

TEST(CudaDriver, ADriverOlderThanCuda12CannotRunAnyBuild) {
  EXPECT_EQ(cuda_driver_problem(12040, 11080),
            "this ditbatch was built with CUDA 12.4, the driver supports CUDA 11.8: ditbatch needs CUDA 12 or newer; "
            "run it where the driver supports CUDA 12.4 (the 525 series or newer)");
}

TEST(CudaVersions, NamesReadAsTheLibrariesNumberThem) {
  EXPECT_EQ(cuda_version_name(12040), "12.4");
  EXPECT_EQ(cuda_version_name(12090), "12.9");
  EXPECT_EQ(cuda_version_name(13000), "13.0");
  EXPECT_EQ(cuda_version_name(11080), "11.8");
  EXPECT_EQ(cudnn_version_name(90100), "9.1.0");
  EXPECT_EQ(cudnn_version_name(91301), "9.13.1");
  EXPECT_EQ(cudnn_version_name(91900), "9.19.0");
  EXPECT_EQ(cublas_version_name(120405), "12.4.5");
  EXPECT_EQ(cublas_version_name(130100), "13.1.0");
}

// CMake read the toolkit (nvcc --version) and cudnn_version.h itself; the binary's answer comes
// from the headers' macros at compile time. The two must agree, and so must the cuDNN paths
// (tools/cmake/cudnn_features.cmake against kernels/cudnn_graph.h).
TEST(CudaBuildInfo, AgreesWithWhatCMakeFound) {
  const CudaBuild b = cuda_build();
  EXPECT_EQ(cuda_version_name(b.cuda), major_minor(DITBATCH_CMAKE_CUDA_VERSION));
  EXPECT_EQ(cudnn_version_name(static_cast<size_t>(b.cudnn)), DITBATCH_CMAKE_CUDNN_VERSION);
  EXPECT_EQ(b.cudnn_sdpa, DITBATCH_CMAKE_CUDNN_SDPA != 0);
  EXPECT_EQ(b.cudnn_sdpa_padding, DITBATCH_CMAKE_CUDNN_SDPA_PADDING != 0);
  EXPECT_EQ(b.cudnn_deviceless, DITBATCH_CMAKE_CUDNN_DEVICELESS != 0);
  EXPECT_TRUE(b.cudnn_conv);
  EXPECT_EQ(b.architectures, DITBATCH_CMAKE_CUDA_ARCHITECTURES);
  EXPECT_EQ(b.cublas / 10000, b.cuda / 1000) << "cuBLAS " << b.cublas << " is not the toolkit's (" << b.cuda << ")";
}

TEST(CudaBuildInfo, ThisMachinesDriverIsJudgedByThePureCheck) {
  const int driver = driver_version();
  EXPECT_EQ(cuda_runtime().driver, driver);
  EXPECT_EQ(cuda_driver_problem(), cuda_driver_problem(CUDART_VERSION, driver));
}

// Without a driver (this build machine): auto falls back to the CPU, cuda and the backend
// itself refuse, naming the reason, before touching a device.
TEST(CudaBuildInfo, WithoutADriverAutoTakesTheCpuAndCudaIsRefused) {
  if (driver_version() > 0) GTEST_SKIP() << "this machine has a CUDA driver (" << driver_version() << ")";
  const Log log(0, 1, "warn");
  EXPECT_EQ(make_backend("auto", 0, log)->device(), Device::Host);
  EXPECT_EQ(test::input_error_of([&] { make_backend("cuda", 0, log); }),
            "--backend cuda: no CUDA driver on this machine (no GPU)");
  EXPECT_EQ(test::input_error_of([&] { CudaBackend backend(CudaBackendOptions{}, log); }),
            "cuda backend: no CUDA driver on this machine (no GPU)");
}

TEST(CudaVersion, ReportsTheBuildTheDriverAndTheCudnnPaths) {
  const auto r = test::run(test::exe() + " --version");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<std::string> lines = lines_of(r.output);
  ASSERT_GE(lines.size(), 6u) << r.output;
  const CudaBuild b = cuda_build();
  EXPECT_EQ(lines[1], fmt::format("CUDA backend: built with CUDA {}, cuBLAS {}, cuDNN {} headers, for {}",
                                  major_minor(DITBATCH_CMAKE_CUDA_VERSION), cublas_version_name(b.cublas),
                                  DITBATCH_CMAKE_CUDNN_VERSION, DITBATCH_CMAKE_CUDA_ARCHITECTURES));
  EXPECT_EQ(lines[2], std::string("cuDNN paths compiled in: SDPA attention ") +
                          (!DITBATCH_CMAKE_CUDNN_SDPA ? "no (headers older than 9.13.0: attention takes the GEMM path)"
                           : DITBATCH_CMAKE_CUDNN_SDPA_PADDING
                               ? "yes, lengths padded to buckets yes"
                               : "yes, lengths padded to buckets no (headers older than 9.15.0: a plan per prompt length)") +
                          ", convolution yes");
  EXPECT_EQ(lines[3].rfind("found at run time: ", 0), 0u) << lines[3];
  const int driver = driver_version();
  if (driver == 0) {
    EXPECT_EQ(lines[4], "driver: none (no CUDA driver on this machine (no GPU))");
    EXPECT_NE(lines[3].find("found at run time: no driver; cudart "), std::string::npos) << lines[3];
    EXPECT_EQ(lines[5], "GPUs: none");
  } else {
    const std::string problem = cuda_driver_problem(CUDART_VERSION, driver);
    EXPECT_EQ(lines[4], problem.empty() ? "driver: ok" : "driver: REFUSED: " + problem);
  }
}

#endif
