// Attention fallbacks of our own (cuDNN's fused SDPA is in attention_cudnn.cpp):
//
// 1. attention_flash: a FlashAttention-style kernel on CUDA cores. A block takes 32 query rows
//    of one head (8 warps x 4 rows), walks the keys in tiles of 32 (one key per lane) staged in
//    shared memory as fp32, and keeps an online softmax in fp32 (exp2 of log2e-prescaled
//    scores). Any head dim up to 384 (the VAE's single head), causal, GQA. Simple and exact
//    rather than fast: it is the oracle and the path for small problems.
// 2. attention_gemm: materialised. S = scale * Q K^T by strided-batched cuBLASLt GEMMs in fp32,
//    a softmax kernel (fp32, causal mask) writes P in the input dtype, O = P V by cuBLASLt.
//    Query rows go in chunks so that S and P stay under ~1 GiB whatever the sequence.
// 3. set_sequence_lengths: the two device words a padded cuDNN SDPA call reads its real
//    lengths from, written on the stream (in order with the call, whatever runs before it).
#include <math_constants.h>

#include <map>
#include <mutex>
#include <utility>

#include "device_utils.cuh"
#include "gemm.h"
#include "launch.h"

namespace ditbatch::cuda {

// ---------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------

constexpr int kFlashWarps = 8;
constexpr int kFlashRowsPerWarp = 4;
constexpr int kFlashRows = kFlashWarps * kFlashRowsPerWarp;  // query rows per block
constexpr int kFlashKeys = 32;                                // keys per tile: one per lane

// Shared memory: q_s [32][ks] and k_s [32][ks] (ks = Dh rounded up to 4, plus 4: float4 rows
// whose 8-lane phases fall on distinct banks), v_s [32][Dh].
inline size_t flash_shared_bytes(int64_t Dh) {
  const int64_t ks = ((Dh + 3) / 4) * 4 + 4;
  return static_cast<size_t>((kFlashRows * ks + kFlashKeys * ks + kFlashKeys * Dh) * 4);
}

template <typename T, int kMaxD>
__global__ void __launch_bounds__(kFlashWarps * 32)
    flash_attention_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                           T* __restrict__ o, int64_t Lq, int64_t Lk, int H, int Hkv, int Dh, float scale_log2,
                           bool causal) {
  constexpr int kPerLane = kMaxD / 32;  // output dims per lane: d = lane + 32 t
  extern __shared__ float4 shared_f4[];
  float* const q_s = reinterpret_cast<float*>(shared_f4);
  const int ks = ((Dh + 3) / 4) * 4 + 4;
  float* const k_s = q_s + kFlashRows * ks;
  float* const v_s = k_s + kFlashKeys * ks;
  const int h = blockIdx.y, g = h / (H / Hkv);
  const int64_t q0 = int64_t{blockIdx.x} * kFlashRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  for (int idx = threadIdx.x; idx < kFlashRows * ks; idx += blockDim.x) {
    const int r = idx / ks, d = idx % ks;
    const int64_t qi = q0 + r;
    q_s[idx] = (d < Dh && qi < Lq) ? to_f(q[(qi * H + h) * Dh + d]) * scale_log2 : 0.0f;
  }

  float row_max[kFlashRowsPerWarp], row_sum[kFlashRowsPerWarp], acc[kFlashRowsPerWarp][kPerLane];
#pragma unroll
  for (int r = 0; r < kFlashRowsPerWarp; ++r) {
    row_max[r] = -CUDART_INF_F;
    row_sum[r] = 0.0f;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) acc[r][t] = 0.0f;
  }

  const int64_t k_end = causal ? min(Lk, q0 + kFlashRows) : Lk;
  for (int64_t k0 = 0; k0 < k_end; k0 += kFlashKeys) {
    __syncthreads();  // the previous tile is consumed (and, the first time, q_s is written)
    for (int idx = threadIdx.x; idx < kFlashKeys * ks; idx += blockDim.x) {
      const int j = idx / ks, d = idx % ks;
      const int64_t key = k0 + j;
      const bool inside = d < Dh && key < Lk;
      k_s[idx] = inside ? to_f(k[(key * Hkv + g) * Dh + d]) : 0.0f;
      if (d < Dh) v_s[j * Dh + d] = inside ? to_f(v[(key * Hkv + g) * Dh + d]) : 0.0f;
    }
    __syncthreads();

    // Scores (log2 domain): lane j holds key k0 + j against the warp's rows.
    float score[kFlashRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kFlashRowsPerWarp; ++r) score[r] = 0.0f;
    const float* k_row = k_s + lane * ks;
    for (int d = 0; d < ks - 4; d += 4) {
      const float4 kv = *reinterpret_cast<const float4*>(k_row + d);
#pragma unroll
      for (int r = 0; r < kFlashRowsPerWarp; ++r) {
        const float4 qv = *reinterpret_cast<const float4*>(q_s + (warp * kFlashRowsPerWarp + r) * ks + d);
        score[r] += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
      }
    }
    const int64_t key = k0 + lane;
#pragma unroll
    for (int r = 0; r < kFlashRowsPerWarp; ++r) {
      const int64_t qi = q0 + warp * kFlashRowsPerWarp + r;
      const bool valid = key < Lk && (!causal || key <= qi);
      const float s = valid ? score[r] : -CUDART_INF_F;
      const float new_max = fmaxf(row_max[r], warp_max(s));
      float p = 0.0f, correction = 1.0f;
      if (new_max != -CUDART_INF_F) {  // uniform across the warp
        p = exp2f(s - new_max);
        correction = exp2f(row_max[r] - new_max);
      }
      row_sum[r] = row_sum[r] * correction + warp_sum(p);
      row_max[r] = new_max;
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) acc[r][t] *= correction;
      score[r] = p;
    }

    // acc += P V: key j's probability comes from lane j.
    for (int j = 0; j < kFlashKeys; ++j) {
      float vv[kPerLane];
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) {
        const int d = lane + 32 * t;
        vv[t] = d < Dh ? v_s[j * Dh + d] : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < kFlashRowsPerWarp; ++r) {
        const float pj = __shfl_sync(0xffffffffu, score[r], j);
#pragma unroll
        for (int t = 0; t < kPerLane; ++t) acc[r][t] += pj * vv[t];
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kFlashRowsPerWarp; ++r) {
    const int64_t qi = q0 + warp * kFlashRowsPerWarp + r;
    if (qi >= Lq) continue;
    const float inv = row_sum[r] > 0.0f ? 1.0f / row_sum[r] : 0.0f;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int d = lane + 32 * t;
      if (d < Dh) o[(qi * H + h) * Dh + d] = from_f<T>(acc[r][t] * inv);
    }
  }
}

// One warp per row of S [rows = heads x nq, kl valid columns, row stride ld]: P = softmax(S)
// over the valid keys (j <= the row's query index when causal), 0 elsewhere; fp32 math, P stored
// in T. Two passes over the row: an online max and sum (each lane rescales its sum when its
// maximum grows; the lanes' pairs combine in the warp reduction), then P. At 1024^2 a row is
// ~4,200 fp32 scores and S ~1.6 GB per chunk: a third pass would read it all once more.
template <typename T>
__global__ void softmax_rows_kernel(const float* __restrict__ scores, T* __restrict__ probs, int64_t rows,
                                    int64_t nq, int64_t kl, int64_t ld, int64_t i0, bool causal) {
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t valid = causal ? min(kl, i0 + row % nq + 1) : kl;
  const float* s = scores + row * ld;
  T* p = probs + row * ld;
  float mx = -CUDART_INF_F, sum = 0.0f;
  for (int64_t j = lane; j < valid; j += 32) {
    const float x = s[j];
    if (x > mx) {
      sum = sum * expf(mx - x) + 1.0f;
      mx = x;
    } else {
      sum += expf(x - mx);
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {  // combine (max, sum) pairs across the warp
    const float other_mx = __shfl_xor_sync(0xffffffffu, mx, offset);
    const float other_sum = __shfl_xor_sync(0xffffffffu, sum, offset);
    const float m = fmaxf(mx, other_mx);
    sum = (mx == -CUDART_INF_F ? 0.0f : sum * expf(mx - m)) +
          (other_mx == -CUDART_INF_F ? 0.0f : other_sum * expf(other_mx - m));
    mx = m;
  }
  const float inv = 1.0f / sum;
  for (int64_t j = lane; j < kl; j += 32) p[j] = from_f<T>(j < valid ? expf(s[j] - mx) * inv : 0.0f);
}

__global__ void set_sequence_lengths_kernel(int32_t* __restrict__ lengths, int32_t Lq, int32_t Lk) {
  lengths[0] = Lq;
  lengths[kSeqLenStride] = Lk;
}

// ---------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------

namespace {

void check_attention(const char* path, const AttentionShape& s) {
  if (s.Lq <= 0 || s.Lk <= 0 || s.H <= 0 || s.Hkv <= 0 || s.Dh <= 0 || s.H % s.Hkv != 0 ||
      (s.causal && s.Lq != s.Lk) || s.H > 65535)
    fail(cat("attention (", path, "): Lq ", s.Lq, " Lk ", s.Lk, " H ", s.H, " Hkv ", s.Hkv, " Dh ", s.Dh,
             s.causal ? " causal" : "", ": need positive sizes, H % Hkv == 0, H <= 65535, Lq == Lk if causal"));
}

// Lets `kernel` launch with more than 48 KiB of dynamic shared memory on ctx's device (up to
// the device's opt-in limit). cudaFuncSetAttribute acts on the current device only, so the
// limit set so far is remembered per device and kernel: a second device in the process raises
// its own. (Keyed by the kernel's address: instances of one template share a function type.)
template <typename Kernel>
void opt_in_shared_memory(const CudaContext& ctx, Kernel* kernel, size_t shared, const char* op) {
  if (shared <= 48 * 1024) return;
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, size_t> raised;  // (device, kernel) -> the limit set
  const std::pair<int, const void*> key{ctx.device, reinterpret_cast<const void*>(kernel)};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = raised.find(key);
  if (it != raised.end() && shared <= it->second) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(ctx.max_shared_per_block)),
        cat(op, ": raising the shared-memory limit on device ", ctx.device));
  raised[key] = ctx.max_shared_per_block;
}

template <typename T, int kMaxD>
void launch_flash(const CudaContext& ctx, const T* q, const T* k, const T* v, T* o, const AttentionShape& s) {
  const size_t shared = flash_shared_bytes(s.Dh);
  if (shared > ctx.max_shared_per_block)
    fail(cat("attention (flash): head dim ", s.Dh, " needs ", shared, " bytes of shared memory, the device allows ",
             ctx.max_shared_per_block));
  opt_in_shared_memory(ctx, flash_attention_kernel<T, kMaxD>, shared, "attention (flash)");
  const dim3 grid(static_cast<unsigned>((s.Lq + kFlashRows - 1) / kFlashRows), static_cast<unsigned>(s.H));
  const float scale_log2 = s.scale * 1.4426950408889634f;
  flash_attention_kernel<T, kMaxD><<<grid, kFlashWarps * 32, shared, ctx.stream>>>(
      q, k, v, o, s.Lq, s.Lk, static_cast<int>(s.H), static_cast<int>(s.Hkv), static_cast<int>(s.Dh), scale_log2,
      s.causal);
  ctx.launched("attention (flash)");
}

}  // namespace

void attention_flash(const CudaContext& ctx, const void* q, const void* k, const void* v, void* o, DType dtype,
                     const AttentionShape& s) {
  check_attention("flash", s);
  if (s.Dh > kFlashMaxHeadDim) fail(cat("attention (flash): head dim ", s.Dh, " > ", kFlashMaxHeadDim));
  dispatch_float(dtype, "attention (flash)", "q, k, v", [&](auto t) {
    using T = decltype(t);
    const T* qp = static_cast<const T*>(q);
    const T* kp = static_cast<const T*>(k);
    const T* vp = static_cast<const T*>(v);
    T* op = static_cast<T*>(o);
    if (s.Dh <= 32) launch_flash<T, 32>(ctx, qp, kp, vp, op, s);
    else if (s.Dh <= 64) launch_flash<T, 64>(ctx, qp, kp, vp, op, s);
    else if (s.Dh <= 128) launch_flash<T, 128>(ctx, qp, kp, vp, op, s);
    else if (s.Dh <= 256) launch_flash<T, 256>(ctx, qp, kp, vp, op, s);
    else launch_flash<T, 384>(ctx, qp, kp, vp, op, s);
  });
}

int64_t attention_gemm(const CudaContext& ctx, const void* q, const void* k, const void* v, void* o, DType dtype,
                       const AttentionShape& s) {
  check_attention("gemm", s);
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  const int64_t G = s.H / s.Hkv;
  // S (f32) and P (dtype) for `chunk` query rows of every head: ~1 GiB at most. Their rows are
  // padded to a multiple of 8 elements (32 bytes of S, 16 of P in bf16): with the leading
  // dimension kl itself cuBLASLt may not use its TMA kernels for a joint length L + S that is
  // not a multiple of 16 bytes.
  auto padded = [](int64_t n) { return (n + 7) / 8 * 8; };
  const int64_t per_row = s.H * padded(s.Lk) * (4 + es);
  int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(s.Lq, (int64_t{1} << 30) / per_row));
  if (ctx.attention_chunk_rows > 0) chunk = std::min(chunk, ctx.attention_chunk_rows);
  if (chunk > 64 && chunk < s.Lq) chunk = chunk / 64 * 64;
  DeviceBlock scores = ctx.scratch(static_cast<size_t>(s.H * chunk * padded(s.Lk) * 4), "attention (gemm): scores");
  DeviceBlock probs =
      ctx.scratch(static_cast<size_t>(s.H * chunk * padded(s.Lk) * es), "attention (gemm): probabilities");
  const char* qb = static_cast<const char*>(q);
  char* ob = static_cast<char*>(o);
  int64_t chunks = 0;
  for (int64_t i0 = 0; i0 < s.Lq; i0 += chunk, ++chunks) {
    const int64_t nq = std::min(chunk, s.Lq - i0);
    const int64_t kl = s.causal ? std::min(s.Lk, i0 + nq) : s.Lk;  // later keys are all masked
    const int64_t ld = padded(kl);
    // S_h = scale Q_h K_g^T for the heads h = g G + b of each kv head g, batched over g.
    for (int64_t b = 0; b < G; ++b) {
      GemmCall c;
      c.op = "attention (gemm): scores";
      c.m = kl;
      c.n = nq;
      c.k = s.Dh;
      c.a = GemmOperand{k, dtype, true, s.Hkv * s.Dh, s.Dh};
      c.b = GemmOperand{qb + ((i0 * s.H + b) * s.Dh) * es, dtype, false, s.H * s.Dh, G * s.Dh};
      c.d = scores.as<float>() + b * nq * ld;
      c.d_dtype = DType::F32;
      c.ldd = ld;
      c.d_batch_stride = G * nq * ld;
      c.batch = static_cast<int>(s.Hkv);
      c.alpha = s.scale;
      ctx.gemm->run(ctx, c);
    }
    const int64_t rows = s.H * nq;
    dispatch_float(dtype, "attention (gemm)", "q, k, v", [&](auto t) {
      using T = decltype(t);
      softmax_rows_kernel<T><<<grid_for_rows(rows), kThreads, 0, ctx.stream>>>(scores.as<float>(), probs.as<T>(),
                                                                                rows, nq, kl, ld, i0, s.causal);
    });
    ctx.launched("attention (gemm): softmax");
    // O_h = P_h V_g, written straight into o [Lq, H, Dh].
    for (int64_t b = 0; b < G; ++b) {
      GemmCall c;
      c.op = "attention (gemm): output";
      c.m = s.Dh;
      c.n = nq;
      c.k = kl;
      c.a = GemmOperand{v, dtype, false, s.Hkv * s.Dh, s.Dh};
      c.b = GemmOperand{probs.as<char>() + (b * nq * ld) * es, dtype, false, ld, G * nq * ld};
      c.d = ob + ((i0 * s.H + b) * s.Dh) * es;
      c.d_dtype = dtype;
      c.ldd = s.H * s.Dh;
      c.d_batch_stride = G * s.Dh;
      c.batch = static_cast<int>(s.Hkv);
      ctx.gemm->run(ctx, c);
    }
  }
  return chunks;
}

void set_sequence_lengths(const CudaContext& ctx, int32_t* lengths, int64_t Lq, int64_t Lk) {
  if (!lengths || reinterpret_cast<uintptr_t>(lengths) % 16 != 0)
    fail("attention (cuDNN SDPA): the sequence-length buffer must be 16-byte aligned");
  if (Lq < 1 || Lq > INT32_MAX || Lk < 1 || Lk > INT32_MAX)
    fail(cat("attention (cuDNN SDPA): sequence lengths ", Lq, " and ", Lk, " must be positive int32"));
  set_sequence_lengths_kernel<<<1, 1, 0, ctx.stream>>>(lengths, static_cast<int32_t>(Lq), static_cast<int32_t>(Lk));
  ctx.launched("attention (cuDNN SDPA): sequence lengths");
}

}  // namespace ditbatch::cuda
