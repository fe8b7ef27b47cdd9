// cuDNN's implicit-GEMM convolution for the VAE's 3x3 convolutions: one fused graph
// (convolution forward with fp32 accumulation into a virtual tensor, + bias) through the
// backend API, NHWC activations and KRSC filters exactly as the Backend stores them, so no
// im2col buffer and no layout change. bf16 only, channel counts a multiple of 8. Plans are
// built once per (H, W, Cin, Cout) and cached; any failure disables the path for the life of
// the backend with the reason, and the caller uses im2col + cuBLASLt instead.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "cuda_context.h"
#include "cudnn_path.h"

namespace ditbatch::cuda {

struct ConvShape {
  int64_t H = 0, W = 0, Cin = 0, Cout = 0;
};

class CudnnConv : public CudnnPath {
 public:
  CudnnConv();

  static constexpr size_t kMinVersion = 90000;

  // Can this call go to cuDNN? If not, *why says why.
  bool eligible(const void* x, const void* w, const void* bias, const void* y, DType dtype, const ConvShape& s,
                std::string* why) const;
  // Queues y = conv3x3(x, w) + bias on ctx.stream (all of `dtype`). Failed: *error says why.
  Result run(const CudaContext& ctx, const void* x, const void* w, const void* bias, void* y, DType dtype,
             const ConvShape& s, std::string* error);
};

}  // namespace ditbatch::cuda
