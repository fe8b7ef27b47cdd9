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

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

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

// The same shapes padded to the attention bucket, the real lengths in the SEQ_LEN tensors
// (cuDNN >= 9.15): the graph a job of many prompt lengths runs. With older headers or an older
// cuDNN the graph is refused with the reason, and the path takes exact lengths (CudnnSdpa.*).
TEST(CudnnGraphs, PaddedSdpaHasAnEngineForTheBucketedDitShapesOnH200) {
  if (!cudnn::sdpa_compiled())
    GTEST_SKIP() << "built against cuDNN " << kHeaders << " headers: the SDPA operation is compiled out";
  if (!cudnn::sdpa_seq_len_usable()) {
    try {
      cudnn::sdpa_graph(4224, 4224, 24, 128, /*padded=*/true);
      ADD_FAILURE() << "a padded SDPA graph was built without SDPA sequence lengths";
    } catch (const cudnn::Failure& e) {
      EXPECT_NE(std::string(e.what()).find("9.15.0"), std::string::npos) << e.what();
    }
    GTEST_SKIP() << "cuDNN " << cudnnGetVersion() << " / headers " << kHeaders << ": no SDPA sequence lengths (9.15.0)";
  }
  SKIP_WITHOUT_DEVICELESS_CUDNN();
  const int64_t shapes[][4] = {{4224, 4224, 24, 128}, {4352, 4224, 24, 128}, {1152, 1152, 24, 128},
                               {384, 384, 4, 128},    {256, 256, 2, 64}};
  for (const auto& s : shapes) {
    auto plan = heuristics_on_h200(cudnn::sdpa_graph(s[0], s[1], s[2], s[3], /*padded=*/true));
    ASSERT_TRUE(plan);
    EXPECT_GE(plan->usable_configs, 1);
    EXPECT_NE(plan->graph.name.find("padded"), std::string::npos) << plan->graph.name;
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

// Where cuDNN has sequence lengths (headers and library >= 9.15.0), lengths are padded to the
// bucket when the caller's spare rows leave room for both, so that every text length of a
// resolution falls into a few plans; otherwise every call takes its exact lengths.
TEST(CudnnSdpa, PadsLengthsToTheBucketOnlyWhereTheSpareRowsLeaveRoom) {
  cuda::CudnnSdpa sdpa(128), exact(0);
  const bool pads = !sdpa.disabled() && cudnn::sdpa_seq_len_usable();
  const auto shape = [](int64_t Lq, int64_t Lk) {
    cuda::AttentionShape s;
    s.Lq = Lq, s.Lk = Lk, s.H = s.Hkv = 24, s.Dh = 128, s.scale = 0.088f;
    return s;
  };
  EXPECT_EQ(exact.spare_rows_wanted(), 0);
  const auto e = exact.plan_shape(shape(4116, 4108), 127);
  EXPECT_EQ(std::tuple(e.Lq, e.Lk, e.padded), std::tuple(int64_t{4116}, int64_t{4108}, false));
  EXPECT_EQ(sdpa.status().find("padded") != std::string::npos, pads) << sdpa.status();
  if (!pads) {
    EXPECT_EQ(sdpa.spare_rows_wanted(), 0);
    const auto p = sdpa.plan_shape(shape(4116, 4108), 127);
    EXPECT_FALSE(p.padded);
    if (!cudnn::sdpa_compiled())
      GTEST_SKIP() << "built against cuDNN " << kHeaders << " headers: the SDPA operation is compiled out";
    GTEST_SKIP() << "cuDNN " << cudnnGetVersion() << " / headers " << kHeaders << ": exact lengths only ("
                 << sdpa.status() << ")";
  }
  EXPECT_EQ(sdpa.spare_rows_wanted(), 127);
  const auto p = sdpa.plan_shape(shape(4116, 4108), 127);
  EXPECT_EQ(std::tuple(p.Lq, p.Lk, p.padded), std::tuple(int64_t{4224}, int64_t{4224}, true));
  // 4108 -> 4224 needs 116 spare rows: with 100 the call keeps its exact lengths
  const auto short_of_room = sdpa.plan_shape(shape(4116, 4108), 100);
  EXPECT_EQ(std::tuple(short_of_room.Lq, short_of_room.Lk, short_of_room.padded),
            std::tuple(int64_t{4116}, int64_t{4108}, false));
  const auto on_the_bucket = sdpa.plan_shape(shape(4224, 4096), 0);
  EXPECT_EQ(std::tuple(on_the_bucket.Lq, on_the_bucket.Lk, on_the_bucket.padded),
            std::tuple(int64_t{4224}, int64_t{4096}, true));
  // A 1024x1024 job (4096 image tokens) of every text length 1..512: ceil(512 / 128) plans.
  std::set<std::pair<int64_t, int64_t>> plans;
  for (int64_t L = 1; L <= 512; ++L) {
    const auto b = sdpa.plan_shape(shape(4096 + L, 4096 + L), sdpa.spare_rows_wanted());
    ASSERT_TRUE(b.padded);
    ASSERT_GE(b.Lq, 4096 + L);
    ASSERT_LT(b.Lq, 4096 + L + 128);
    plans.insert({b.Lq, b.Lk});
  }
  EXPECT_EQ(plans.size(), 4u);
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

// An engine config's name (engine_name: what the self-check is keyed on) is the engine and
// knobs cuDNN itself reports for the finalized plan (its JSON form).
TEST(CudnnGraphs, EngineNamesAreThoseOfCudnnsOwnPlanDescription) {
  SKIP_WITHOUT_DEVICELESS_CUDNN();
  auto plan = heuristics_on_h200(cudnn::conv3x3_bias_graph(128, 128, 384, 384, DType::BF16), /*finalize=*/true);
  ASSERT_TRUE(plan);
  std::vector<char> text(1 << 16);
  int64_t n = 0;
  ASSERT_EQ(cudnnBackendGetAttribute(plan->plan.get(), CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                     static_cast<int64_t>(text.size()), &n, text.data()),
            CUDNN_STATUS_SUCCESS);
  const auto json = nlohmann::json::parse(std::string(text.data()));
  const auto& engine = json.at("engine");
  std::vector<int64_t> values;
  for (const auto& [name, value] : engine.at("knobChoices").items()) values.push_back(value.get<int64_t>());
  // "engine 41 (knobs 2=3 13=1 ...)": the id, then type=value pairs
  std::smatch m;
  ASSERT_TRUE(std::regex_search(plan->engine, m, std::regex("^engine (\\d+)"))) << plan->engine;
  EXPECT_EQ(std::stoll(m[1]), engine.at("engineId").get<int64_t>()) << plan->engine;
  std::vector<int64_t> named;
  const std::regex knob("(\\d+)=(-?\\d+)");
  for (auto it = std::sregex_iterator(plan->engine.begin(), plan->engine.end(), knob); it != std::sregex_iterator(); ++it)
    named.push_back(std::stoll((*it)[2]));
  std::sort(values.begin(), values.end());
  std::sort(named.begin(), named.end());
  EXPECT_EQ(named, values) << plan->engine << " vs " << engine.dump();
}

// Plans are made only from engine configs whose numerical notes promise the same bytes on
// every run in full precision: the exact list is the usable list less those notes, and a
// plan's engine is one of them.
TEST(CudnnGraphs, PlansComeOnlyFromExactEngineConfigs) {
  SKIP_WITHOUT_DEVICELESS_CUDNN();
  std::vector<std::unique_ptr<cudnn::Plan>> plans;
  plans.push_back(heuristics_on_h200(cudnn::conv3x3_bias_graph(256, 256, 384, 192, DType::BF16), true));
  if (cudnn::sdpa_compiled() && cudnnGetVersion() >= 91301)
    plans.push_back(heuristics_on_h200(cudnn::sdpa_graph(4116, 4116, 24, 128)));
  for (const auto& plan : plans) {
    ASSERT_TRUE(plan);
    std::vector<size_t> expected;
    for (size_t i = 0; i < static_cast<size_t>(plan->usable_configs); ++i) {
      bool exact = true;
      for (const auto note : cudnn::numerical_notes(plan->configs[i]))
        exact = exact && note != CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC &&
                note != CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION;
      if (exact) expected.push_back(i);
    }
    EXPECT_EQ(plan->exact_configs, expected) << plan->graph.name;
    EXPECT_FALSE(plan->exact_configs.empty()) << plan->graph.name;
    if (plan->plan.get()) {
      bool found = false;
      for (const size_t i : plan->exact_configs) found = found || cudnn::engine_name(plan->configs[i]) == plan->engine;
      EXPECT_TRUE(found) << plan->graph.name << ": " << plan->engine;
    }
  }
}

// The plan cache of a path, on cuDNN's real heuristics and plans for an H200 (convolution
// engines are precompiled: their plans finalize without a GPU).
TEST(CudnnPlanCache, ChecksEachEngineConfigOnceAndHoldsABoundedNumberOfPlans) {
  SKIP_WITHOUT_DEVICELESS_CUDNN();
  const cudnn::Desc props = cudnn::device_properties(h200_json());
  cudnn::PlanCache cache("", /*dynamic_shapes=*/false);
  cache.use_device_properties(&props);
  std::set<std::string> engines;
  const size_t shapes = cudnn::PlanCache::kMaxPlans + 3;
  for (size_t i = 0; i < shapes; ++i) {
    const int64_t H = 8 + static_cast<int64_t>(i), W = 16;
    bool new_engine = false;
    const cudnn::Plan& plan =
        cache.plan({H, W, 16, 32, 0}, [&] { return cudnn::conv3x3_bias_graph(H, W, 16, 32, DType::BF16); }, &new_engine);
    EXPECT_EQ(new_engine, engines.insert(plan.engine).second) << "shape " << H << "x" << W << ": " << plan.engine;
    bool again = true;
    cache.plan({H, W, 16, 32, 0}, [&] { return cudnn::conv3x3_bias_graph(H, W, 16, 32, DType::BF16); }, &again);
    EXPECT_FALSE(again);
  }
  EXPECT_LT(engines.size(), shapes) << "every shape had an engine of its own: the check would run per shape";
  EXPECT_EQ(cache.plans_held(), cudnn::PlanCache::kMaxPlans);
  std::printf("[cudnn] %zu shapes: %zu engine configs; %s\n", shapes, engines.size(), cache.status().c_str());
  // An engine already checked is checked again under another graph variant (SDPA's padded
  // graph asks more of it), once.
  for (const bool expected : {true, false}) {
    bool new_engine = !expected;
    cache.plan({8, 16, 16, 32, 1}, [] { return cudnn::conv3x3_bias_graph(8, 16, 16, 32, DType::BF16); }, &new_engine);
    EXPECT_EQ(new_engine, expected);
  }
}

TEST(CudnnPlanCache, ARefusedShapeCostsThatShapeOnly) {
  SKIP_WITHOUT_DEVICELESS_CUDNN();
  const cudnn::Desc props = cudnn::device_properties(h200_json());
  const auto refused = []() -> cudnn::Graph { throw cudnn::Failure("no engine for this shape"); };
  const auto good = [] { return cudnn::conv3x3_bias_graph(32, 32, 16, 32, DType::BF16); };
  bool new_engine = false;
  {  // after a plan was made, refusals stay per shape
    cudnn::PlanCache cache("", false);
    cache.use_device_properties(&props);
    cache.plan({32, 32, 16, 32, 0}, good, &new_engine);
    for (int64_t i = 0; i < 3; ++i) EXPECT_THROW(cache.plan({1, i, 0, 0, 0}, refused, &new_engine), cudnn::NoPlan);
    EXPECT_TRUE(cache.refused({1, 2, 0, 0, 0}));
    EXPECT_FALSE(cache.disabled());
  }
  {  // two refusals before any plan: the environment, the path goes off
    cudnn::PlanCache cache("", false);
    cache.use_device_properties(&props);
    EXPECT_THROW(cache.plan({1, 0, 0, 0, 0}, refused, &new_engine), cudnn::NoPlan);
    try {
      cache.plan({1, 1, 0, 0, 0}, refused, &new_engine);
      ADD_FAILURE() << "the second refusal before any plan did not throw";
    } catch (const cudnn::NoPlan&) {
      ADD_FAILURE() << "the second refusal before any plan was taken for one shape's";
    } catch (const cudnn::Failure& e) {
      EXPECT_NE(std::string(e.what()).find("made no plan"), std::string::npos) << e.what();
    }
  }
}

// What picks a kernel: a plan's extents (SDPA: Lq, Lk; convolution: H, W) share one, the heads,
// head dim and graph variant (convolution: the channels) do not: Qwen-Image-2.1's 32 x 128
// heads beside Qwen-Image's 24 x 128, the vision tower's 16 x 80, the padded graph.
TEST(CudnnPlanCache, AKernelIsPickedByEverythingButTheExtents) {
  using Cache = cudnn::PlanCache;
  EXPECT_EQ(Cache::kernel_key({4224, 4224, 24, 128, 1}), Cache::kernel_key({4352, 128, 24, 128, 1}));
  for (const Cache::Key other : {Cache::Key{4224, 4224, 32, 128, 1}, Cache::Key{4224, 4224, 16, 80, 1},
                                 Cache::Key{4224, 4224, 24, 64, 1}, Cache::Key{4224, 4224, 24, 128, 0}})
    EXPECT_NE(Cache::kernel_key({4224, 4224, 24, 128, 1}), Cache::kernel_key(other))
        << other[2] << " " << other[3] << " " << other[4];
}

// An engine config already checked is checked again where it serves another kernel: here the
// convolution's channels, on cuDNN's real H200 heuristics (its plans finalize without a GPU).
// The same engine runs several channel counts, so keying the check by the engine alone would
// skip these.
TEST(CudnnPlanCache, ChecksAnEngineAgainForEachKernelItServes) {
  SKIP_WITHOUT_DEVICELESS_CUDNN();
  const cudnn::Desc props = cudnn::device_properties(h200_json());
  cudnn::PlanCache cache("", /*dynamic_shapes=*/false);
  cache.use_device_properties(&props);
  std::set<std::string> engines, checked;
  int reused_across_kernels = 0;
  for (const int64_t cin : {16, 32, 64})
    for (const int64_t cout : {16, 32, 64})
      for (const int64_t h : {8, 12}) {
        bool new_engine = false;
        const cudnn::Plan& plan = cache.plan(
            {h, 16, cin, cout, 0}, [&] { return cudnn::conv3x3_bias_graph(h, 16, cin, cout, DType::BF16); }, &new_engine);
        const bool first_for_kernel = checked.insert(fmt::format("{} {} {}", plan.engine, cin, cout)).second;
        reused_across_kernels += first_for_kernel && !engines.insert(plan.engine).second;
        EXPECT_EQ(new_engine, first_for_kernel) << h << "x16, " << cin << " -> " << cout << ": " << plan.engine;
      }
  std::printf("[cudnn] 18 convolutions: %zu engine configs, %d reused for other channels\n", engines.size(),
              reused_across_kernels);
  EXPECT_GT(reused_across_kernels, 0) << "no engine served two channel counts: the test shows nothing";
}

// A plan (and the kernel caches, and the handle) is destroyed only after the work queued with
// it is done: the least recently used plan dropped at the limit (its last execution may still
// be queued), every plan when the path is switched off (a failed sample 1 while sample 0's
// attention is queued), and at release. Observed through the cache's wait, counted.
TEST(CudnnPlanCache, WaitsForQueuedWorkBeforeDestroyingAPlan) {
  SKIP_WITHOUT_DEVICELESS_CUDNN();
  const cudnn::Desc props = cudnn::device_properties(h200_json());
  cudnn::PlanCache cache("", /*dynamic_shapes=*/false);
  cache.use_device_properties(&props);
  std::vector<size_t> held_at_wait;  // the plans still there when each wait ran
  cache.set_queue_wait([&] { held_at_wait.push_back(cache.plans_held()); });
  bool new_engine = false;
  const size_t shapes = cudnn::PlanCache::kMaxPlans + 2;
  for (size_t i = 0; i < shapes; ++i) {
    const int64_t H = 8 + static_cast<int64_t>(i);
    cache.plan({H, 16, 16, 32, 0}, [&] { return cudnn::conv3x3_bias_graph(H, 16, 16, 32, DType::BF16); }, &new_engine);
  }
  EXPECT_EQ(held_at_wait, std::vector<size_t>(2, cudnn::PlanCache::kMaxPlans)) << "two plans dropped at the limit";
  cache.disable("a failed execution");
  ASSERT_EQ(held_at_wait.size(), 3u) << "switched off without waiting for queued work";
  EXPECT_EQ(held_at_wait[2], cudnn::PlanCache::kMaxPlans);
  EXPECT_EQ(cache.plans_held(), 0u);
  cache.release();  // nothing left that work could be queued with
  EXPECT_EQ(held_at_wait.size(), 3u);
}

// Where cuDNN cannot build a path's graph with dynamic shapes (here: the convolution's
// dynamic-shape engines compile at run time, which needs the driver), the cache falls back to
// a plan per shape, says so, and the path stays on.
TEST(CudnnPlanCache, FallsBackToAPlanPerShapeWithoutDynamicShapes) {
  SKIP_WITHOUT_DEVICELESS_CUDNN();
  if (!cudnn::kernel_cache_usable()) GTEST_SKIP() << "no kernel cache in this build or cuDNN (9.5.0)";
  const cudnn::Desc props = cudnn::device_properties(h200_json());
  cudnn::PlanCache cache("", /*dynamic_shapes=*/true);
  cache.use_device_properties(&props);
  bool new_engine = false;
  const cudnn::Plan& plan =
      cache.plan({64, 64, 16, 32, 0}, [] { return cudnn::conv3x3_bias_graph(64, 64, 16, 32, DType::BF16); }, &new_engine);
  EXPECT_TRUE(plan.plan.get() != nullptr);
  EXPECT_FALSE(plan.dynamic_shape);
  EXPECT_FALSE(cache.has_kernel_cache());
  EXPECT_NE(cache.status().find("a plan per shape"), std::string::npos) << cache.status();
  std::printf("[cudnn] %s\n", cache.status().c_str());
}
