// Shared by the CUDA tests (included only in CUDA builds): skipping without a GPU, and a
// backend configured for a test.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <optional>

#include "cuda_backend.h"
#include "cuda_device.h"

namespace ditbatch::test {

#define SKIP_WITHOUT_GPU()                                                                        \
  do {                                                                                            \
    if (cuda_device_count() == 0) GTEST_SKIP() << "GPU test skipped: " << cuda_describe_devices(); \
  } while (0)

// The environment's options (DITBATCH_CUDA_ATTENTION / _CONV let tools/device/check.sh keep
// cuDNN out of a run, DITBATCH_CUDA_POISON / _SYNC add checks) with this activation dtype;
// `checked` adds poisoned allocations and synchronous launches (a fault names its op). The
// cuDNN self-check is off: it would replace a wrong cuDNN output with ours, and the tests must
// see cuDNN's own.
inline CudaBackendOptions cuda_test_options(DType act = DType::BF16, bool checked = true) {
  CudaBackendOptions o = CudaBackendOptions::from_env(0);
  o.act_dtype = act;
  o.poison = o.poison || checked;
  o.sync_each_op = o.sync_each_op || checked;
  o.cudnn_self_check = false;
  return o;
}
inline std::unique_ptr<CudaBackend> make_cuda_test_backend(DType act, bool checked,
                                                           std::optional<CudaAttentionPath> attention = std::nullopt) {
  CudaBackendOptions o = cuda_test_options(act, checked);
  if (attention) o.attention = *attention;
  return std::make_unique<CudaBackend>(o, Log(0, 1, "warn"));
}

// One line per measured figure, collected by tools/device/check.sh into its summary.
inline void metric(const std::string& name, double value) {
  std::printf("[cuda-metric] %s %.6g\n", name.c_str(), value);
}

}  // namespace ditbatch::test
