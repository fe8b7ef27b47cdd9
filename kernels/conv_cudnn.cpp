#include "conv_cudnn.h"

#include "cuda_check.h"
#include "cudnn_graph.h"

namespace ditbatch::cuda {

// The VAE's convolutions have a few shapes per resolution: a plan each, from the precompiled
// engines (with dynamic shapes cuDNN 9.19 offers only runtime-compiled ones).
CudnnConv::CudnnConv()
    : CudnnPath(cudnn::unusable_reason(kMinVersion, "the convolution graph"), /*dynamic_shapes=*/false) {}

bool CudnnConv::eligible(const void* x, const void* w, const void* bias, const void* y, DType dtype,
                         const ConvShape& s, std::string* why) const {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (disabled()) return no("cuDNN convolution is " + status());
  if (dtype != DType::BF16) return no(cat("dtype ", dtype_name(dtype), " (the cuDNN path is for bf16)"));
  // 16-byte vectors of channels: the tensor-core engines need them (the VAE's conv_out, 3
  // channels, stays on im2col).
  if (s.Cin % 8 != 0 || s.Cout % 8 != 0) return no(cat("channels ", s.Cin, " -> ", s.Cout, " (multiples of 8)"));
  if (cache().refused({s.H, s.W, s.Cin, s.Cout, 0})) return no("cuDNN has no plan for this shape");
  for (const void* p : {x, w, bias, y})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return no("a tensor is not 16-byte aligned");
  return true;
}

CudnnConv::Result CudnnConv::run(const CudaContext& ctx, const void* x, const void* w, const void* bias, void* y,
                                 DType dtype, const ConvShape& s, std::string* error) {
  return run_plan(
      ctx, {s.H, s.W, s.Cin, s.Cout, 0}, [&] { return cudnn::conv3x3_bias_graph(s.H, s.W, s.Cin, s.Cout, dtype); },
      {cudnn::kConvX, cudnn::kConvW, cudnn::kConvBias, cudnn::kConvY},
      {const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(bias), y}, "conv2d_3x3 (cuDNN)",
      [&] { return cat("cuDNN convolution (", s.H, "x", s.W, ", ", s.Cin, " -> ", s.Cout, ")"); }, error);
}

}  // namespace ditbatch::cuda
