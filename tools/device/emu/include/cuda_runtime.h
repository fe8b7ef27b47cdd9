// CPU emulation of the CUDA runtime, for tools/device/emulate.py only: just the part of the API
// that kernels/ uses, plus the device-side names (threadIdx, __syncthreads, __shfl_sync, ...)
// so that kernels/*.cu compile as C++ and run on the host. Threads are fibers; a block's
// threads run interleaved on one OS thread, switching at barriers and warp shuffles.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

// ---- runtime API ------------------------------------------------------------------------------

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNoDevice = 100,
};
typedef struct EmuStream* cudaStream_t;
typedef struct EmuEvent* cudaEvent_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76 };
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDisableTiming = 2;
constexpr unsigned cudaHostAllocDefault = 0;

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct cudaDeviceProp {
  char name[256];
  int major, minor, multiProcessorCount;
  size_t totalGlobalMem, sharedMemPerBlockOptin;
};
struct cudaFuncAttributes {
  int numRegs;
};

const char* cudaGetErrorString(cudaError_t);
const char* cudaGetErrorName(cudaError_t);
cudaError_t cudaGetLastError();
// Emulation only: the next cudaFree (which still frees) returns `err` and leaves it as the last
// error, as a failing call does on a GPU; for tests of the error paths (DITBATCH_CUDA_EMULATION).
void emuFailNextFree(cudaError_t err);
cudaError_t cudaGetDeviceCount(int*);
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDevice(int*);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp*, int);
cudaError_t cudaDeviceGetAttribute(int*, cudaDeviceAttr, int);
cudaError_t cudaRuntimeGetVersion(int*);
cudaError_t cudaDriverGetVersion(int*);
cudaError_t cudaMalloc(void**, size_t);
cudaError_t cudaFree(void*);
cudaError_t cudaHostAlloc(void**, size_t, unsigned);
cudaError_t cudaFreeHost(void*);
cudaError_t cudaMemGetInfo(size_t*, size_t*);
cudaError_t cudaMemcpy(void*, const void*, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t = nullptr);
cudaError_t cudaMemset(void*, int, size_t);
cudaError_t cudaMemsetAsync(void*, int, size_t, cudaStream_t = nullptr);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t*, unsigned);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaEventCreate(cudaEvent_t*);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t*, unsigned);
cudaError_t cudaEventDestroy(cudaEvent_t);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventElapsedTime(float*, cudaEvent_t, cudaEvent_t);
namespace emu {
cudaError_t func_set_attribute(const void* func, cudaFuncAttribute, int);
}
template <typename F>
cudaError_t cudaFuncSetAttribute(F* func, cudaFuncAttribute attr, int value) {
  return emu::func_set_attribute(reinterpret_cast<const void*>(func), attr, value);
}
template <typename F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F*) {
  a->numRegs = 0;
  return cudaSuccess;
}

// ---- the device side --------------------------------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static  // one block runs at a time: a function-local static is the block's

namespace emu {

struct Config {
  dim3 grid, block;
  size_t shared_bytes = 0;
  cudaStream_t stream = nullptr;
  Config(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = nullptr) : grid(g), block(b), shared_bytes(s), stream(st) {}
};

dim3 thread_idx();
dim3 block_idx();
dim3 block_dim();
dim3 grid_dim();
void sync_block();
void sync_warp();
uint64_t exchange(uint64_t bits, int src_lane, bool xor_mode);  // a warp shuffle of 8 bytes
void* dynamic_shared();
// Runs body once per thread of every block of the grid (the kernel's arguments are captured).
void run_grid(const Config& cfg, void (*body)(void*), void* context, const void* kernel);

template <typename K>
struct Launcher {
  K kernel;
  Config cfg;
  template <typename... Args>
  void operator()(Args... args) const {
    auto call = [&]() { kernel(args...); };
    using Call = decltype(call);
    run_grid(cfg, [](void* c) { (*static_cast<Call*>(c))(); }, &call, reinterpret_cast<const void*>(kernel));
  }
};
template <typename K>
Launcher<K> launch(K kernel, Config cfg) {
  return Launcher<K>{kernel, cfg};
}

template <typename T>
T shuffle(T v, int lane, bool xor_mode) {
  static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = exchange(bits, lane, xor_mode);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace emu

#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define blockDim (::emu::block_dim())
#define gridDim (::emu::grid_dim())

inline void __syncthreads() { emu::sync_block(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::sync_warp(); }
template <typename T>
T __shfl_sync(unsigned, T v, int src_lane) {
  return emu::shuffle(v, src_lane, false);
}
template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  return emu::shuffle(v, lane_mask, true);
}
// The _rn intrinsics: one IEEE operation each (built with -ffp-contract=off, no FMA).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
using std::max;
using std::min;
