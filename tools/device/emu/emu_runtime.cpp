// CPU emulation of the CUDA runtime and execution model for tools/device/emulate.py.
//
// A kernel launch runs its blocks one after another; a block's threads are fibers on this OS
// thread (a 20-line x86-64 context switch), switched at __syncthreads and at warp shuffles,
// which implement the real semantics: a barrier releases when every live thread of the block
// has arrived, a shuffle when every live lane of the warp has posted its value. So a kernel's
// index arithmetic, its barriers, its shuffles and its shared-memory use all run for real;
// what is not emulated is concurrency between blocks (none of ours communicate) and timing.
// Launch errors are reported through cudaGetLastError as on a GPU: too many threads, grid y/z
// over 65535, dynamic shared memory over 48 KiB without cudaFuncSetAttribute. Device memory is
// host memory (so AddressSanitizer, with EMU_ASAN=1, checks every kernel's accesses).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "cuda_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif

extern "C" void emu_switch(void** save_sp, void* load_sp);
extern "C" void emu_fiber_entry();

// Saves the callee-saved registers and the stack pointer, loads another fiber's.
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_switch, .-emu_switch
)");

namespace emu {
namespace {

constexpr size_t kStackBytes = 128 * 1024;
constexpr size_t kSharedBytes = 232448;  // an H100's opt-in maximum per block

struct Fiber {
  void* sp = nullptr;
  bool done = false;
  dim3 tid;
  int linear = 0;
};

struct Warp {
  uint64_t values[32] = {};
  int posted = 0, read = 0;
  uint64_t generation = 0;
};

struct Grid {
  std::vector<Fiber> fibers;
  std::vector<char*> stacks;
  void* scheduler_sp = nullptr;
  int current = -1;
  dim3 block, grid, block_dim;
  void (*body)(void*) = nullptr;
  void* context = nullptr;
  int live = 0;
  int arrived = 0;
  uint64_t barrier_generation = 0;
  std::vector<Warp> warps;
  std::vector<int> warp_live;
  bool progress = false;
#ifdef EMU_ASAN
  const void* main_stack_bottom = nullptr;
  size_t main_stack_size = 0;
#endif
};

Grid g;
cudaError_t last_error = cudaSuccess;
// Two devices, as a node with two GPUs: what acts per device (the shared-memory opt-in) is
// tested against a second one. Memory is the host's for both.
constexpr int kDevices = 2;
int current_device = 0;
// cudaFuncAttributeMaxDynamicSharedMemorySize per device and kernel, as a GPU keeps it
std::map<std::pair<int, const void*>, int> shared_limit;
alignas(64) char shared_memory[kSharedBytes];

Fiber& current() { return g.fibers[static_cast<size_t>(g.current)]; }

void yield() {
  Fiber& f = current();
#ifdef EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, g.main_stack_bottom, g.main_stack_size);
#endif
  emu_switch(&f.sp, g.scheduler_sp);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "emu: %s\n", what);
  std::abort();
}

}  // namespace

dim3 thread_idx() { return current().tid; }
dim3 block_idx() { return g.block; }
dim3 block_dim() { return g.block_dim; }
dim3 grid_dim() { return g.grid; }
void* dynamic_shared() { return shared_memory; }

void sync_block() {
  const uint64_t generation = g.barrier_generation;
  ++g.arrived;
  while (g.barrier_generation == generation) {
    if (g.arrived >= g.live) {
      g.arrived = 0;
      ++g.barrier_generation;
      g.progress = true;
      break;
    }
    yield();
  }
}

uint64_t exchange(uint64_t bits, int lane_arg, bool xor_mode) {
  const int linear = current().linear, w = linear / 32, lane = linear % 32;
  Warp& warp = g.warps[static_cast<size_t>(w)];
  warp.values[lane] = bits;
  uint64_t generation = warp.generation;
  ++warp.posted;
  while (warp.generation == generation) {  // everyone has posted
    if (warp.posted >= g.warp_live[static_cast<size_t>(w)]) {
      warp.posted = 0;
      ++warp.generation;
      g.progress = true;
      break;
    }
    yield();
  }
  const int src = (xor_mode ? (lane ^ lane_arg) : lane_arg) & 31;
  const uint64_t result = warp.values[src];
  generation = warp.generation;
  ++warp.read;
  while (warp.generation == generation) {  // everyone has read: the slots may be reused
    if (warp.read >= g.warp_live[static_cast<size_t>(w)]) {
      warp.read = 0;
      ++warp.generation;
      g.progress = true;
      break;
    }
    yield();
  }
  return result;
}

void sync_warp() { exchange(0, 0, false); }

cudaError_t func_set_attribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || static_cast<size_t>(value) > kSharedBytes)
    return last_error = cudaErrorInvalidValue;
  shared_limit[{current_device, func}] = value;
  return cudaSuccess;
}

}  // namespace emu

extern "C" void emu_fiber_entry() {
  using namespace emu;
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g.main_stack_bottom, &g.main_stack_size);
#endif
  g.body(g.context);
  Fiber& f = current();
  f.done = true;
  --g.live;
  --g.warp_live[static_cast<size_t>(f.linear / 32)];
  g.progress = true;
  void* unused = nullptr;
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, g.main_stack_bottom, g.main_stack_size);
#endif
  emu_switch(&unused, g.scheduler_sp);
  __builtin_unreachable();
}

namespace emu {

void run_grid(const Config& cfg, void (*body)(void*), void* context, const void* kernel) {
  const dim3 b = cfg.block, gr = cfg.grid;
  const size_t threads = static_cast<size_t>(b.x) * b.y * b.z;
  if (threads == 0 || threads > 1024 || gr.x == 0 || gr.y == 0 || gr.z == 0 || gr.y > 65535 || gr.z > 65535 ||
      b.z > 64) {
    last_error = cudaErrorInvalidConfiguration;
    return;
  }
  if (cfg.shared_bytes > 48 * 1024) {  // needs the kernel's own opt-in, as on a GPU
    auto it = shared_limit.find({current_device, kernel});
    if (it == shared_limit.end() || static_cast<size_t>(it->second) < cfg.shared_bytes) {
      last_error = cudaErrorInvalidValue;
      return;
    }
  }
  if (g.current != -1) die("a kernel launched from inside a kernel");
  g.body = body;
  g.context = context;
  g.grid = gr;
  g.block_dim = b;
  while (g.stacks.size() < threads) g.stacks.push_back(static_cast<char*>(std::aligned_alloc(64, kStackBytes)));
  g.fibers.assign(threads, Fiber{});
  const size_t warps = (threads + 31) / 32;
  g.warps.assign(warps, Warp{});
  for (unsigned bz = 0; bz < gr.z; ++bz)
    for (unsigned by = 0; by < gr.y; ++by)
      for (unsigned bx = 0; bx < gr.x; ++bx) {
        g.block = dim3(bx, by, bz);
        g.warp_live.assign(warps, 0);
        for (size_t t = 0; t < threads; ++t) {
          Fiber& f = g.fibers[t];
          f.done = false;
          f.linear = static_cast<int>(t);
          f.tid = dim3(static_cast<unsigned>(t % b.x), static_cast<unsigned>((t / b.x) % b.y),
                       static_cast<unsigned>(t / (static_cast<size_t>(b.x) * b.y)));
          ++g.warp_live[t / 32];
#ifdef EMU_ASAN
          __asan_unpoison_memory_region(g.stacks[t], kStackBytes);  // frames abandoned by the last block
#endif
          // A fresh stack: six callee-saved registers, then emu_fiber_entry as the return address.
          uint64_t* sp = reinterpret_cast<uint64_t*>(g.stacks[t] + kStackBytes);
          *--sp = 0;
          *--sp = reinterpret_cast<uint64_t>(&emu_fiber_entry);
          for (int r = 0; r < 6; ++r) *--sp = 0;
          f.sp = sp;
        }
        for (Warp& w : g.warps) w = Warp{};
        g.live = static_cast<int>(threads);
        g.arrived = 0;
        int idle_rounds = 0;
        while (g.live > 0) {
          g.progress = false;
          for (size_t t = 0; t < threads; ++t) {
            if (g.fibers[t].done) continue;
            g.current = static_cast<int>(t);
#ifdef EMU_ASAN
            void* fake = nullptr;
            __sanitizer_start_switch_fiber(&fake, g.stacks[t], kStackBytes);
#endif
            emu_switch(&g.scheduler_sp, g.fibers[t].sp);
#ifdef EMU_ASAN
            __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
          }
          g.current = -1;
          idle_rounds = g.progress ? 0 : idle_rounds + 1;
          if (idle_rounds > 2) die("deadlock: threads wait at different barriers or shuffles");
        }
      }
}

}  // namespace emu

// ---- the runtime API --------------------------------------------------------------------------

namespace {
size_t allocated = 0;
constexpr size_t kDeviceBytes = size_t{80} << 30;
}  // namespace

struct EmuStream {};
struct EmuEvent {
  std::chrono::steady_clock::time_point t;
};

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
  }
  return "unknown error";
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
  }
  return "cudaErrorUnknown";
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = emu::last_error;
  emu::last_error = cudaSuccess;
  return e;
}
cudaError_t cudaGetDeviceCount(int* n) {
  *n = emu::kDevices;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= emu::kDevices) return emu::last_error = cudaErrorInvalidValue;
  emu::current_device = d;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = emu::current_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "CPU emulation of a CUDA device");
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 4;  // few blocks per grid-stride loop: the loops' strides get used
  p->totalGlobalMem = kDeviceBytes;
  p->sharedMemPerBlockOptin = emu::kSharedBytes;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrComputeCapabilityMajor ? 9 : 0;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 0;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = 0;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  if (!*p) return emu::last_error = cudaErrorMemoryAllocation;
  allocated += n;
  return cudaSuccess;
}
static cudaError_t next_free_error = cudaSuccess;
void emuFailNextFree(cudaError_t err) { next_free_error = err; }
cudaError_t cudaFree(void* p) {
  std::free(p);
  const cudaError_t err = next_free_error;
  next_free_error = cudaSuccess;
  if (err != cudaSuccess) emu::last_error = err;
  return err;
}
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) { return cudaMalloc(p, n); }
cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  *total = kDeviceBytes;
  *free_bytes = kDeviceBytes > allocated ? kDeviceBytes - allocated : 0;
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  std::memmove(d, s, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t) {
  return cudaMemcpy(d, s, n, k);
}
cudaError_t cudaMemset(void* p, int v, size_t n) {
  std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) { return cudaMemset(p, v, n); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new EmuStream;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new EmuEvent;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  e->t = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return cudaSuccess;
}
