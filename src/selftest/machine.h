// What a node's backend delivers, measured through the Backend interface itself: GEMM
// throughput at a square size and at the transformer's own shapes, a device copy, and the
// transformer's joint attention. Each figure says what it counted (FLOPs or bytes), so that it
// can be held against the hardware's datasheet.
#pragma once

#include <string>
#include <vector>

#include "core/backend.h"

namespace ditbatch::selftest {

struct Measurement {
  std::string name;    // "gemm 8192^3", "gemm M8192 K3072 N12288 (img_mlp.net.0)"
  std::string metric;  // "gemm", "copy", "attention", "gemm_model": what rank 0 compares across GPUs
  double value = 0;    // in `unit`
  std::string unit;    // "TFLOP/s", "GB/s"
  double seconds = 0;  // median time of one call
  std::string counted; // "1.10 TFLOP per call (2 M K N)", "2.15 GB per call (read + write)"
};

// y = x w^T with x [M, K], w [N, K] in the backend's activation dtype: 2 M K N FLOPs a call.
Measurement measure_gemm(Backend& be, int64_t M, int64_t K, int64_t N, const std::string& what);
// A device-to-device copy of `bytes` (activation dtype): read + written bytes a call.
Measurement measure_copy(Backend& be, int64_t bytes);
// Attention over L tokens, H heads of Dh: 4 L^2 H Dh FLOPs a call (Q K^T and P V).
Measurement measure_attention(Backend& be, int64_t L, int64_t H, int64_t Dh, const std::string& what);

// The set selftest runs: the GPU's at the real model's sizes (1024^2, the CFG batch), the CPU's
// smaller; `quick` keeps the square GEMM and the copy (the figures compared across ranks).
std::vector<Measurement> measure_machine(Backend& be, bool quick);

}  // namespace ditbatch::selftest
