// CudaBackend: checks every op's arguments against the Backend conventions (the same checks
// and messages as the CPU backend, plus dtypes), then calls the launchers in kernels/*.cu and
// the cuBLASLt / cuDNN wrappers.
//
// Dtypes accepted (f32 everywhere, for tests, and what the models pass in bf16 mode):
//   linear       x f32|bf16 (converted to w's dtype), w f32|bf16, bias any float, out f32|bf16
//   conv2d_3x3, conv2d_3x3_stride2: x f32|bf16, w f32|bf16, bias any float -> act dtype
//   attention    q, k, v one dtype f32|bf16 -> that dtype
//   rms_norm, layer_norm_modulate, l2_normalize: inputs f32|bf16 in any mix -> act dtype
//   silu, gelu_tanh, gelu_erf, upsample: -> x's dtype; silu_mul -> gate's dtype
//   add_, gated_add_, clamp_: any mix of f32|bf16, in place
//   rope_*: x f32|bf16, cos/sin f32; embedding: table f32|bf16, host i64 ids -> f32
//   axpy_: x f32, y f32|bf16; div_, scale_rows_: f32; add_ and div_ also by a row vector; row_norms: x f32|bf16 -> f32
//   linear -> out's dtype (f32|bf16); attention -> out of any float dtype (q's: no copy);
//   fused: linear_gelu as linear (-> act dtype); rms_norm_rope as rms_norm then rope; gated_add_layer_norm_modulate_ in one kernel when x is f32 and gate,
//   shift, scale share one dtype, else the Backend's two-op default
//   permute: any dtype -> the same dtype;
//   scale_shift_ f32; to_u8 f32 -> u8; count_nonfinite x f32|bf16
// Anything else fails with a message naming the op and the dtypes.
#include "cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "attention_cudnn.h"
#include "conv_cudnn.h"
#include "core/error.h"
#include "core/op_shapes.h"
#include "cuda_check.h"
#include "cuda_context.h"
#include "cuda_device.h"
#include "cuda_memory.h"
#include "gemm.h"
#include "launch.h"

namespace ditbatch {

using cuda::DeviceAllocator;
using cuda::DeviceBlock;

const char* attention_path_name(CudaAttentionPath p) {
  switch (p) {
    case CudaAttentionPath::Auto: return "auto";
    case CudaAttentionPath::Cudnn: return "cudnn";
    case CudaAttentionPath::Gemm: return "gemm";
    case CudaAttentionPath::Flash: return "flash";
  }
  return "?";
}

const char* conv_path_name(CudaConvPath p) {
  switch (p) {
    case CudaConvPath::Auto: return "auto";
    case CudaConvPath::Cudnn: return "cudnn";
    case CudaConvPath::Im2col: return "im2col";
  }
  return "?";
}

namespace {

// ---- options from the environment -----------------------------------------------------------

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool env_flag(const char* name, bool fallback) {
  const std::string v = env(name);
  if (v.empty()) return fallback;
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  fail_input("{}={}: expected 1 or 0", name, v);
}

// A row count from 0 to 4096 (`expected` says what 0 means).
int64_t env_rows(const char* name, int64_t fallback, const char* expected) {
  const std::string v = env(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || n < 0 || n > 4096) fail_input("{}={}: expected {}", name, v, expected);
  return n;
}

// ---- device memory as a Buffer --------------------------------------------------------------

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(std::shared_ptr<DeviceAllocator> owner, DeviceBlock block, size_t bytes)
      : owner_(std::move(owner)), block_(std::move(block)), bytes_(bytes) {}
  void* data() override { return block_.get(); }
  size_t bytes() const override { return bytes_; }
  Device device() const override { return Device::Cuda; }

 private:
  std::shared_ptr<DeviceAllocator> owner_;  // outlives block_: members die in reverse order
  DeviceBlock block_;
  size_t bytes_;
};

// ---- argument checks ------------------------------------------------------------------------

// The first byte of row `row` of a dense tensor, rows being all but the last dim (the op's
// shape check has bounded row).
char* row_ptr(const Tensor& t, int64_t row) {
  return static_cast<char*>(t.raw()) + static_cast<size_t>(row * t.cols()) * dtype_size(t.dtype());
}

void expect_cuda(const char* op, const Tensor& t, const char* what) {
  DITBATCH_CHECK(t.defined() && t.device() == Device::Cuda, "{}: {} must be a CUDA tensor, got {}", op, what,
                 t.defined() ? t.describe() + (t.device() == Device::Host ? " on the host" : "") : "undefined");
}

void expect_float(const char* op, const Tensor& t, const char* what) {
  expect_cuda(op, t, what);
  DITBATCH_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16, "{}: {} must be f32 or bf16, got {}", op, what,
                 t.describe());
}

// ---- host-side conversion into the staging buffer -------------------------------------------

void convert_host(const void* src, DType st, void* dst, DType dt, int64_t n) {
  const size_t ss = dtype_size(st), ds = dtype_size(dt);
  const int64_t grain = 1 << 16;
#pragma omp parallel for schedule(static) if (n > 4 * grain)
  for (int64_t i0 = 0; i0 < n; i0 += grain)
    convert(static_cast<const char*>(src) + i0 * ss, st, static_cast<char*>(dst) + i0 * ds, dt,
            static_cast<size_t>(std::min(grain, n - i0)));
}

double nmse_host(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    num += d * d;
    den += static_cast<double>(y[i]) * y[i];
  }
  return den > 0 ? num / den : num;
}

}  // namespace

CudaBackendOptions CudaBackendOptions::from_env(int device) {
  CudaBackendOptions o;
  o.device = device;
  const std::string act = env("DITBATCH_CUDA_ACT");
  if (!act.empty()) {
    o.act_dtype = parse_dtype(act);
    if (o.act_dtype != DType::BF16 && o.act_dtype != DType::F32)
      fail_input("DITBATCH_CUDA_ACT={}: expected bf16 or f32", act);
  }
  const std::string attention = env("DITBATCH_CUDA_ATTENTION");
  if (attention == "auto" || attention.empty()) o.attention = CudaAttentionPath::Auto;
  else if (attention == "cudnn") o.attention = CudaAttentionPath::Cudnn;
  else if (attention == "gemm") o.attention = CudaAttentionPath::Gemm;
  else if (attention == "flash") o.attention = CudaAttentionPath::Flash;
  else fail_input("DITBATCH_CUDA_ATTENTION={}: expected auto, cudnn, gemm or flash", attention);
  o.poison = env_flag("DITBATCH_CUDA_POISON", o.poison);
  o.sync_each_op = env_flag("DITBATCH_CUDA_SYNC", o.sync_each_op);
  const std::string conv = env("DITBATCH_CUDA_CONV");
  if (conv == "auto" || conv.empty()) o.conv = CudaConvPath::Auto;
  else if (conv == "cudnn") o.conv = CudaConvPath::Cudnn;
  else if (conv == "im2col") o.conv = CudaConvPath::Im2col;
  else fail_input("DITBATCH_CUDA_CONV={}: expected auto, cudnn or im2col", conv);
  o.cudnn_self_check = env_flag("DITBATCH_CUDA_CUDNN_CHECK", o.cudnn_self_check);
  o.reference_gemm = env_flag("DITBATCH_CUDA_REFERENCE_GEMM", o.reference_gemm);
  o.sdpa_bucket = env_rows("DITBATCH_CUDA_SDPA_BUCKET", o.sdpa_bucket, "0 (exact lengths) to 4096 rows");
  o.attention_chunk_rows =
      env_rows("DITBATCH_CUDA_ATTENTION_CHUNK_ROWS", o.attention_chunk_rows, "0 (as memory allows) to 4096 rows");
  return o;
}

// ---- state ----------------------------------------------------------------------------------

struct CudaBackend::Impl {
  CudaBackendOptions opt;
  Log log;
  std::string device_name;
  cudaStream_t stream = nullptr;
  std::shared_ptr<DeviceAllocator> allocator;
  std::unique_ptr<cuda::GemmEngine> gemm;
  std::unique_ptr<cuda::PinnedStaging> staging;  // made at the first upload
  cuda::CudnnSdpa sdpa;
  cuda::CudnnConv conv;
  cuda::CudaContext ctx;
  cudaEvent_t timing[2] = {nullptr, nullptr};
  int64_t attention_calls[3] = {0, 0, 0};  // cudnn, gemm, flash
  int64_t attention_padded_calls = 0;       // cuDNN calls padded to a bucket
  int64_t attention_gemm_chunks = 0;        // query-row chunks of the GEMM path's calls
  int64_t conv_calls[2] = {0, 0};          // cudnn, im2col

  Impl(const CudaBackendOptions& o, const Log& l) : opt(o), log(l), sdpa(o.sdpa_bucket) {}

  Tensor alloc(const Shape& shape, DType dtype, const char* what, bool exact = false) {
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    DeviceBlock block = allocator->allocate(std::max<size_t>(bytes, 1), what, exact);
    return Tensor(std::make_shared<CudaBuffer>(allocator, std::move(block), bytes), 0, shape, dtype);
  }

  DeviceBlock scratch(size_t bytes, const char* what) { return allocator->allocate(std::max<size_t>(bytes, 1), what); }

  // t's data as `dtype`: t itself, or a converted copy held by `holder` until the caller is done.
  const void* as_dtype(const Tensor& t, DType dtype, DeviceBlock& holder, const char* what) {
    if (t.dtype() == dtype) return t.raw();
    holder = scratch(static_cast<size_t>(t.numel()) * dtype_size(dtype), what);
    cuda::convert(ctx, t.raw(), t.dtype(), holder.get(), dtype, t.numel());
    return holder.get();
  }

  // A bias in D's dtype, 16-byte aligned (cuBLASLt's epilogue reads it as D's type).
  const void* bias_for(const Tensor* bias, DType out_dtype, DeviceBlock& holder, const char* op) {
    if (!bias) return nullptr;
    if (bias->dtype() == out_dtype && reinterpret_cast<uintptr_t>(bias->raw()) % 16 == 0) return bias->raw();
    holder = scratch(static_cast<size_t>(bias->numel()) * dtype_size(out_dtype), op);
    cuda::convert(ctx, bias->raw(), bias->dtype(), holder.get(), out_dtype, bias->numel());
    return holder.get();
  }

  void copy_from_host(const void* src, DType st, void* dst, DType dt, int64_t n) {
    if (n == 0) return;
    if (!staging) staging = std::make_unique<cuda::PinnedStaging>();
    const size_t ss = dtype_size(st), ds = dtype_size(dt);
    const int64_t chunk = static_cast<int64_t>(staging->half_bytes() / ds);
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
      const int64_t count = std::min(chunk, n - i0);
      void* pinned = staging->acquire();
      convert_host(static_cast<const char*>(src) + i0 * ss, st, pinned, dt, count);
      cuda::check(cudaMemcpyAsync(static_cast<char*>(dst) + i0 * ds, pinned, static_cast<size_t>(count) * ds,
                                  cudaMemcpyHostToDevice, stream),
                  "upload: host to device copy");
      staging->submitted(stream);
    }
  }

  void wait(const char* what) {
    allocator->raise_deferred();
    cudaError_t err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess)
      cuda::check(err, fmt::format("{}: a CUDA operation failed (asynchronous errors surface here; rerun with "
                                   "DITBATCH_CUDA_SYNC=1 to name the op)",
                                   what));
  }

  // o [Lq, H, Dh] (allocated, or rows of a larger tensor) = attention of checked q, k, v, by
  // the path the options choose: flash kernel, cuDNN's SDPA (self-checked once per engine config), or
  // the GEMM path, which also catches whatever cuDNN refuses. spare_rows past each tensor let
  // cuDNN pad the lengths to its bucket.
  void attention_to(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, float scale, bool causal,
                    int64_t spare_rows) {
    cuda::AttentionShape s;
    s.Lq = q.dim(0);
    s.H = q.dim(1);
    s.Dh = q.dim(2);
    s.Lk = k.dim(0);
    s.Hkv = k.dim(1);
    s.scale = scale;
    s.causal = causal;
    if (s.Lq == 0 || s.Dh == 0) return;
    const CudaAttentionPath path = opt.attention;
    if (path == CudaAttentionPath::Flash && s.Dh <= cuda::kFlashMaxHeadDim) {
      cuda::attention_flash(ctx, q.raw(), k.raw(), v.raw(), o.raw(), q.dtype(), s);
      ++attention_calls[2];
      return;
    }
    const cuda::CudnnSdpa::PlanShape plan = sdpa.plan_shape(s, spare_rows);
    if ((path == CudaAttentionPath::Auto || path == CudaAttentionPath::Cudnn) &&
        sdpa.eligible(q.raw(), k.raw(), v.raw(), o.raw(), q.dtype(), s, plan, nullptr)) {
      std::string error;
      DeviceBlock lengths;  // a padded call's real lengths (freed in stream order, as a workspace)
      if (plan.padded) {
        lengths = scratch(2 * cuda::kSeqLenStride * sizeof(int32_t), "attention (cuDNN SDPA): sequence lengths");
        cuda::set_sequence_lengths(ctx, lengths.as<int32_t>(), s.Lq, s.Lk);
      }
      const auto result = sdpa.run(ctx, q.raw(), k.raw(), v.raw(), o.raw(), s, plan, lengths.as<int32_t>(), &error);
      if (cudnn_ran(sdpa, result, error, "the GEMM attention path")) {
        ++attention_calls[0];
        attention_padded_calls += plan.padded;
        if (result == cuda::CudnnPath::Result::RanNewEngine && opt.cudnn_self_check) self_check_sdpa(q, k, v, o, s);
        return;
      }
    }
    attention_gemm(q, k, v, o, s);
  }

  // After a cuDNN path's run(): true when cuDNN did the work. Otherwise the caller takes its
  // fallback (named here), for this shape (NoPlan) or, with the path switched off, for good.
  bool cudnn_ran(cuda::CudnnPath& path, cuda::CudnnPath::Result result, const std::string& error,
                 const char* fallback) {
    using Result = cuda::CudnnPath::Result;
    if (result == Result::Ran || result == Result::RanNewEngine) return true;
    if (result == Result::NoPlan) {
      log.warn("{}; using {} for this shape", error, fallback);
    } else {
      log.warn("{}; using {} from now on", error, fallback);
      path.disable(error);
    }
    return false;
  }

  void attention_gemm(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, const cuda::AttentionShape& s) {
    attention_gemm_chunks += cuda::attention_gemm(ctx, q.raw(), k.raw(), v.raw(), o.raw(), q.dtype(), s);
    ++attention_calls[1];
  }

  // im2col over bands of output rows (the column buffer stays near 256 MiB at any size), each
  // band one cuBLASLt GEMM with the bias epilogue. x in in_dtype, bias in y's dtype, y [Ho, Wo, Cout].
  void conv_im2col(const char* op, const void* x, const void* w, DType in_dtype, const void* bias, Tensor& y,
                   const cuda::Conv3x3Geometry& g) {
    const int64_t K = 9 * g.Cin, Cout = y.dim(2);
    const int64_t row_bytes = g.Wo * K * static_cast<int64_t>(dtype_size(in_dtype));
    const int64_t band = std::clamp<int64_t>((int64_t{256} << 20) / std::max<int64_t>(1, row_bytes), 1, g.Ho);
    DeviceBlock col = scratch(static_cast<size_t>(band * row_bytes), cuda::cat(op, ": im2col buffer").c_str());
    for (int64_t y0 = 0; y0 < g.Ho; y0 += band) {
      const int64_t rows = std::min(band, g.Ho - y0);
      cuda::im2col3x3(ctx, x, col.get(), in_dtype, g, y0, rows);
      char* out = row_ptr(y, y0 * g.Wo);
      cuda::linear_gemm(ctx, op, col.get(), w, in_dtype, out, y.dtype(), rows * g.Wo, Cout, K, bias,
                        cuda::GemmEpilogue::Bias);
    }
    ++conv_calls[1];
  }
  static cuda::Conv3x3Geometry same_size(const cuda::ConvShape& s) { return {s.H, s.W, s.Cin, 1, 1, s.H, s.W}; }

  // A 3x3 convolution's operands as its kernels read them: x in the weight dtype, the bias in
  // the output (act) dtype, converted copies held in the blocks while the convolution runs.
  struct ConvOperands {
    DeviceBlock x_conv, bias_conv;
    const void* x = nullptr;
    const void* bias = nullptr;
    DType in_dtype = DType::F32, out_dtype = DType::F32;
  };
  void conv_operands(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias, ConvOperands& o) {
    o.in_dtype = w.dtype();
    o.out_dtype = opt.act_dtype;
    o.x = as_dtype(x, o.in_dtype, o.x_conv, cuda::cat(op, ": x converted to the weight dtype").c_str());
    o.bias = bias_for(&bias, o.out_dtype, o.bias_conv, cuda::cat(op, ": bias in the output dtype").c_str());
  }

  // The first output of an engine config new to a cuDNN path (got) against our own path's (ref): a layout or
  // version problem shows as a large error (bf16 vs bf16 by two algorithms: ~1e-5; a layout
  // error: ~1). Then ref is taken and the reason returned, for the caller to switch that cuDNN
  // path off for the rest of the run; "" when the plan agrees.
  std::string check_cudnn_output(Tensor& got, const Tensor& ref, const std::string& plan, const char* ours) {
    const double err = nmse_device(got, ref, "cuDNN self-check");
    constexpr double kBound = 1e-3;
    if (err <= kBound) {
      log.info("cuDNN plan for {} checked against {}: nmse {:.3g}", plan, ours, err);
      return "";
    }
    const std::string why =
        fmt::format("its output for {} differs from {} by nmse {:.3g} (bound {:g})", plan, ours, err, kBound);
    log.warn("cuDNN disabled for this op: {}; using {}", why, ours);
    cuda::check(cudaMemcpyAsync(got.raw(), ref.raw(), got.nbytes(), cudaMemcpyDeviceToDevice, stream),
                "cuDNN self-check: taking our output");
    return why;
  }

  void self_check_conv(const void* x, const void* w, const void* bias, Tensor& y, const cuda::ConvShape& s) {
    Tensor ref = alloc(y.shape(), y.dtype(), "conv2d_3x3 (cuDNN self-check)");
    conv_im2col("conv2d_3x3", x, w, y.dtype(), bias, ref, same_size(s));
    --conv_calls[1];
    const std::string why = check_cudnn_output(
        y, ref, fmt::format("the {}x{} convolution, {} -> {} channels", s.H, s.W, s.Cin, s.Cout), "im2col + cuBLASLt");
    if (!why.empty()) conv.disable(why);
  }

  void self_check_sdpa(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o, const cuda::AttentionShape& s) {
    Tensor ref = alloc(o.shape(), o.dtype(), "attention (cuDNN self-check)");
    cuda::attention_gemm(ctx, q.raw(), k.raw(), v.raw(), ref.raw(), q.dtype(), s);
    const std::string why = check_cudnn_output(
        o, ref, fmt::format("SDPA Lq {} Lk {} H {} Dh {}", s.Lq, s.Lk, s.H, s.Dh), "the GEMM attention path");
    if (!why.empty()) sdpa.disable(why);
  }

  // nmse(got, ref) of two device tensors of one shape and dtype (waits for the stream).
  double nmse_device(const Tensor& got, const Tensor& ref, const char* what) {
    wait(what);
    Tensor got_host = Tensor::host(got.shape(), got.dtype()), ref_host = Tensor::host(ref.shape(), ref.dtype());
    cuda::check(cudaMemcpy(got_host.raw(), got.raw(), got.nbytes(), cudaMemcpyDeviceToHost), what);
    cuda::check(cudaMemcpy(ref_host.raw(), ref.raw(), ref.nbytes(), cudaMemcpyDeviceToHost), what);
    return nmse_host(got_host.to_f32(), ref_host.to_f32());
  }
};

// ---- construction ---------------------------------------------------------------------------

CudaBackend::CudaBackend(const CudaBackendOptions& options, const Log& log)
    : impl_(std::make_unique<Impl>(options, log)) {
  Impl& m = *impl_;
  DITBATCH_CHECK(options.act_dtype == DType::BF16 || options.act_dtype == DType::F32,
                 "cuda backend: act dtype must be bf16 or f32, got {}", dtype_name(options.act_dtype));
  // Before anything touches the device: a driver too old for this build's toolkit is named
  // as such, not reported as a failed allocation or "no device" later.
  if (const std::string driver = cuda_driver_problem(); !driver.empty()) fail_input("cuda backend: {}", driver);
  const int count = cuda_device_count();
  if (options.device < 0 || options.device >= count)
    fail_input("cuda backend: device {} requested, {} usable ({})", options.device, count, cuda_describe_devices());
  cuda::check(cudaSetDevice(options.device), fmt::format("cuda backend: cudaSetDevice({})", options.device));
  const std::string image = cuda_kernel_image_check();
  if (!image.empty()) fail_input("cuda backend: device {}: {}", options.device, image);
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, options.device), "cuda backend: cudaGetDeviceProperties");
  m.device_name = prop.name;
  cuda::check(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking), "cuda backend: cudaStreamCreate");
  for (auto& e : m.timing) cuda::check(cudaEventCreate(&e), "cuda backend: cudaEventCreate");
  m.allocator = std::make_shared<DeviceAllocator>(options.device, m.stream, options.poison);
  m.gemm = std::make_unique<cuda::GemmEngine>(options.device, m.stream);
  m.gemm->set_force_reference(options.reference_gemm);
  m.ctx.device = options.device;
  m.ctx.stream = m.stream;
  m.ctx.allocator = m.allocator.get();
  m.ctx.gemm = m.gemm.get();
  m.ctx.sm_count = prop.multiProcessorCount;
  m.ctx.max_shared_per_block = prop.sharedMemPerBlockOptin;
  m.ctx.sync_each_op = options.sync_each_op;
  m.ctx.attention_chunk_rows = options.attention_chunk_rows;
  m.ctx.warn = [log = m.log](const std::string& message) { log.warn("{}", message); };
  // What auto will take, said once: a build or a cuDNN without SDPA runs the GEMM path.
  const bool auto_attention = options.attention == CudaAttentionPath::Auto || options.attention == CudaAttentionPath::Cudnn;
  const std::string attention =
      !auto_attention ? std::string(attention_path_name(options.attention))
      : m.sdpa.disabled()
          ? fmt::format("{}: the GEMM path (cuDNN SDPA {})", attention_path_name(options.attention), m.sdpa.status())
          : fmt::format("{}: cuDNN SDPA where eligible, else the GEMM path (cuDNN SDPA {})",
                        attention_path_name(options.attention), m.sdpa.status());
  log.info("CUDA backend on device {}: {} (sm_{}{}, {} SMs, {:.1f} GiB); {}; activations {}, attention {}, "
           "convolution {} (cuDNN {}){}{}",
           options.device, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
           static_cast<double>(prop.totalGlobalMem) / double(1 << 30), cuda_library_versions(),
           dtype_name(options.act_dtype), attention, conv_path_name(options.conv), m.conv.status(),
           options.poison ? ", allocations poisoned" : "", options.sync_each_op ? ", synchronous" : "");
}

CudaBackend::~CudaBackend() {
  Impl& m = *impl_;
  if (m.stream) cudaStreamSynchronize(m.stream);
  for (auto& e : m.timing)
    if (e) cudaEventDestroy(e);
  m.staging.reset();
  m.gemm.reset();
  m.sdpa.release();  // the cuDNN handles are bound to the stream destroyed below
  m.conv.release();
  // Tensors that outlive the backend keep the allocator alive; its cached blocks go now.
  m.allocator->release_cached();
  m.allocator->detach_stream();
  if (m.stream) cudaStreamDestroy(m.stream);
}

std::string CudaBackend::name() const { return fmt::format("cuda:{}", impl_->opt.device); }
DType CudaBackend::act_dtype() const { return impl_->opt.act_dtype; }
DType CudaBackend::weight_dtype() const { return impl_->opt.act_dtype; }
const CudaBackendOptions& CudaBackend::options() const { return impl_->opt; }
void CudaBackend::set_attention_path(CudaAttentionPath path) { impl_->opt.attention = path; }
void CudaBackend::set_conv_path(CudaConvPath path) { impl_->opt.conv = path; }

CudaBackendStats CudaBackend::stats() const {
  const Impl& m = *impl_;
  const cuda::MemoryStats mem = m.allocator->stats();
  CudaBackendStats s;
  s.bytes_in_use = mem.in_use;
  s.peak_bytes_in_use = mem.peak_in_use;
  s.bytes_reserved = mem.reserved;
  s.peak_bytes_reserved = mem.peak_reserved;
  s.device_mallocs = mem.device_mallocs;
  s.allocations = mem.allocations;
  s.gemm_shapes = m.gemm->cached_shapes();
  s.attention_cudnn = m.attention_calls[0];
  s.attention_cudnn_padded = m.attention_padded_calls;
  s.attention_gemm = m.attention_calls[1];
  s.attention_flash = m.attention_calls[2];
  s.attention_gemm_chunks = m.attention_gemm_chunks;
  s.sdpa_status = m.sdpa.status();
  s.conv_cudnn = m.conv_calls[0];
  s.conv_im2col = m.conv_calls[1];
  s.conv_status = m.conv.status();
  return s;
}

void CudaBackend::reset_peak_memory() { impl_->allocator->reset_peaks(); }

void CudaBackend::release_cached_memory() {
  impl_->wait("release_cached_memory");
  impl_->allocator->release_cached();
}

int CudaBackend::begin_timing() {
  cuda::check(cudaEventRecord(impl_->timing[0], impl_->stream), "time_ms: cudaEventRecord");
  return 0;
}

double CudaBackend::end_timing(int) {
  cuda::check(cudaEventRecord(impl_->timing[1], impl_->stream), "time_ms: cudaEventRecord");
  impl_->wait("time_ms");
  float ms = 0;
  cuda::check(cudaEventElapsedTime(&ms, impl_->timing[0], impl_->timing[1]), "time_ms: cudaEventElapsedTime");
  return ms;
}

// ---- memory ---------------------------------------------------------------------------------

Tensor CudaBackend::empty(const Shape& shape, DType dtype) { return impl_->alloc(shape, dtype, "empty"); }

namespace {
void check_upload(const Tensor& host, DType dtype) {
  DITBATCH_CHECK(host.defined() && host.device() == Device::Host, "upload: {} is not a host tensor",
                 host.defined() ? host.describe() : "undefined");
  if (!is_float(host.dtype()) || !is_float(dtype))
    DITBATCH_CHECK(host.dtype() == dtype, "upload: cannot convert {} to {}", host.describe(), dtype_name(dtype));
}
}  // namespace

Tensor CudaBackend::upload(const Tensor& host, DType dtype) {
  check_upload(host, dtype);
  Tensor out = impl_->alloc(host.shape(), dtype, "upload");
  impl_->copy_from_host(host.raw(), host.dtype(), out.raw(), dtype, host.numel());
  return out;
}

Tensor CudaBackend::upload_weight(const Tensor& host) {
  const DType dtype = weight_dtype();
  check_upload(host, dtype);
  Tensor out = impl_->alloc(host.shape(), dtype, "upload_weight", /*exact=*/true);
  impl_->copy_from_host(host.raw(), host.dtype(), out.raw(), dtype, host.numel());
  return out;
}

Tensor CudaBackend::to_host(const Tensor& t) {
  DITBATCH_CHECK(t.defined(), "to_host: undefined tensor");
  if (t.device() != Device::Cuda) return t.clone();
  Tensor out = Tensor::host(t.shape(), t.dtype());
  if (t.nbytes() > 0)
    cuda::check(cudaMemcpyAsync(out.raw(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost, impl_->stream),
                fmt::format("to_host: copying {}", t.describe()));
  impl_->wait("to_host");
  return out;
}

void CudaBackend::copy_(const Tensor& dst, const Tensor& src) {
  expect_float("copy_", dst, "dst");
  expect_float("copy_", src, "src");
  op_shapes::output("copy_", dst, src.shape());
  cuda::convert(impl_->ctx, src.raw(), src.dtype(), dst.raw(), dst.dtype(), src.numel());
}

void CudaBackend::synchronize() { impl_->wait("synchronize"); }

std::optional<Backend::MemoryInfo> CudaBackend::device_memory() {
  MemoryInfo info;
  cuda::check(cudaMemGetInfo(&info.free_bytes, &info.total_bytes), "device_memory: cudaMemGetInfo");
  const cuda::MemoryStats mem = impl_->allocator->stats();
  info.free_bytes += mem.reserved - mem.in_use;  // our cached blocks are ours to reuse
  return info;
}

// ---- dense linear algebra -------------------------------------------------------------------

void CudaBackend::linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) {
  Impl& m = *impl_;
  expect_float("linear", x, "x");
  expect_float("linear", w, "w");
  expect_float("linear", out, "out");
  DITBATCH_CHECK(out.dtype() == DType::F32 || out.dtype() == DType::BF16, "linear: out {} must be f32 or bf16",
                 out.describe());
  if (bias) expect_float("linear", *bias, "bias");
  const auto [M, N, K] = op_shapes::linear("linear", x, w, bias, out);
  if (M == 0 || N == 0) return;
  DeviceBlock x_conv, bias_conv;
  const void* xp = m.as_dtype(x, w.dtype(), x_conv, "linear: x converted to the weight dtype");
  const void* bp = m.bias_for(bias, out.dtype(), bias_conv, "linear: bias in the output dtype");
  cuda::linear_gemm(m.ctx, "linear", xp, w.raw(), w.dtype(), out.raw(), out.dtype(), M, N, K, bp,
                    bp ? cuda::GemmEpilogue::Bias : cuda::GemmEpilogue::None);
}

Tensor CudaBackend::linear_gelu(const Tensor& x, const Tensor& w, const Tensor& bias) {
  Impl& m = *impl_;
  expect_float("linear_gelu", x, "x");
  expect_float("linear_gelu", w, "w");
  expect_float("linear_gelu", bias, "bias");
  const op_shapes::LinearDims d = op_shapes::linear("linear_gelu", x, w, &bias);
  const auto [M, N, K] = d;
  Tensor y = m.alloc(op_shapes::linear_result(x, d), m.opt.act_dtype, "linear_gelu");
  if (M == 0 || N == 0) return y;
  DeviceBlock x_conv, bias_conv;
  const void* xp = m.as_dtype(x, w.dtype(), x_conv, "linear_gelu: x converted to the weight dtype");
  const void* bp = m.bias_for(&bias, y.dtype(), bias_conv, "linear_gelu: bias in the output dtype");
  if (y.dtype() == DType::F32) {
    // f32 mode exists to hold every kernel to fp32 rounding; cuBLASLt's GELU epilogue may use
    // the hardware's approximate tanh, so there the GELU is our kernel's.
    DeviceBlock pre = m.scratch(static_cast<size_t>(y.nbytes()), "linear_gelu: the GEMM output before the GELU");
    cuda::linear_gemm(m.ctx, "linear_gelu", xp, w.raw(), w.dtype(), pre.get(), y.dtype(), M, N, K, bp,
                      cuda::GemmEpilogue::Bias);
    cuda::gelu_tanh(m.ctx, pre.get(), y.raw(), y.dtype(), y.numel());  // not in place: its pointers are __restrict__
    return y;
  }
  cuda::linear_gemm(m.ctx, "linear_gelu", xp, w.raw(), w.dtype(), y.raw(), y.dtype(), M, N, K, bp,
                    cuda::GemmEpilogue::GeluBias);
  return y;
}

namespace {

void expect_conv_args(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias) {
  expect_float(op, x, "x");
  expect_float(op, w, "w");
  expect_float(op, bias, "bias");
}

}  // namespace

Tensor CudaBackend::conv2d_3x3(const Tensor& x, const Tensor& w, const Tensor& bias) {
  Impl& m = *impl_;
  expect_conv_args("conv2d_3x3", x, w, bias);
  op_shapes::conv2d_3x3(x, w, bias);
  const int64_t H = x.dim(0), W = x.dim(1), Cin = x.dim(2), Cout = w.dim(0);
  Tensor y = m.alloc({H, W, Cout}, m.opt.act_dtype, "conv2d_3x3");
  if (H * W == 0 || Cout == 0) return y;
  Impl::ConvOperands o;
  m.conv_operands("conv2d_3x3", x, w, bias, o);
  const cuda::ConvShape s{H, W, Cin, Cout};
  if (m.opt.conv != CudaConvPath::Im2col && o.in_dtype == o.out_dtype &&
      m.conv.eligible(o.x, w.raw(), o.bias, y.raw(), o.out_dtype, s, nullptr)) {
    std::string error;
    const auto result = m.conv.run(m.ctx, o.x, w.raw(), o.bias, y.raw(), o.out_dtype, s, &error);
    if (m.cudnn_ran(m.conv, result, error, "im2col + cuBLASLt")) {
      ++m.conv_calls[0];
      if (result == cuda::CudnnPath::Result::RanNewEngine && m.opt.cudnn_self_check)
        m.self_check_conv(o.x, w.raw(), o.bias, y, s);
      return y;
    }
  }
  m.conv_im2col("conv2d_3x3", o.x, w.raw(), o.in_dtype, o.bias, y, Impl::same_size(s));
  return y;
}

// im2col only: the VAE encoder's three stride-2 convolutions run once per input image.
Tensor CudaBackend::conv2d_3x3_stride2(const Tensor& x, const Tensor& w, const Tensor& bias) {
  expect_conv_args("conv2d_3x3_stride2", x, w, bias);
  op_shapes::conv2d_3x3_stride2(x, w, bias);
  const int64_t H = x.dim(0), W = x.dim(1), Cin = x.dim(2);
  Tensor y = impl_->alloc({H / 2, W / 2, w.dim(0)}, impl_->opt.act_dtype, "conv2d_3x3_stride2");
  if (w.dim(0) == 0) return y;
  Impl::ConvOperands o;
  impl_->conv_operands("conv2d_3x3_stride2", x, w, bias, o);
  impl_->conv_im2col("conv2d_3x3_stride2", o.x, w.raw(), o.in_dtype, o.bias, y, {H, W, Cin, 2, 0, H / 2, W / 2});
  return y;
}

void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal,
                            const Tensor& out, int64_t spare_rows) {
  Impl& m = *impl_;
  expect_float("attention", q, "q");
  expect_float("attention", k, "k");
  expect_float("attention", v, "v");
  expect_float("attention", out, "out");
  op_shapes::attention(q, k, v, causal, out, spare_rows);
  DITBATCH_CHECK(q.dtype() == k.dtype() && k.dtype() == v.dtype(), "attention: q {} k {} v {} must share one dtype",
                 q.describe(), k.describe(), v.describe());
  // The kernels write q's dtype: another out dtype goes through a copy (which has no spare rows).
  if (out.dtype() == q.dtype()) {
    Tensor o = out;
    m.attention_to(q, k, v, o, scale, causal, spare_rows);
    return;
  }
  Tensor o = m.alloc(q.shape(), q.dtype(), "attention");  // [Lq, H, Dh]
  m.attention_to(q, k, v, o, scale, causal, 0);
  copy_(out, o);
}

int64_t CudaBackend::attention_spare_rows() const {
  const CudaAttentionPath path = impl_->opt.attention;
  return path == CudaAttentionPath::Auto || path == CudaAttentionPath::Cudnn ? impl_->sdpa.spare_rows_wanted() : 0;
}

// ---- normalisation --------------------------------------------------------------------------

Tensor CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  Impl& m = *impl_;
  expect_float("rms_norm", x, "x");
  expect_float("rms_norm", weight, "weight");
  op_shapes::row_vector("rms_norm", x, weight, "weight");
  Tensor y = m.alloc(x.shape(), m.opt.act_dtype, "rms_norm");
  cuda::rms_norm(m.ctx, x.raw(), x.dtype(), weight.raw(), weight.dtype(), y.raw(), y.dtype(), x.rows(), x.cols(), eps);
  return y;
}

Tensor CudaBackend::layer_norm_modulate(const Tensor& x, const Tensor& shift, const Tensor& scale, float eps) {
  Impl& m = *impl_;
  expect_float("layer_norm_modulate", x, "x");
  expect_float("layer_norm_modulate", shift, "shift");
  expect_float("layer_norm_modulate", scale, "scale");
  op_shapes::row_vector("layer_norm_modulate", x, shift, "shift");
  op_shapes::row_vector("layer_norm_modulate", x, scale, "scale");
  DITBATCH_CHECK(shift.dtype() == scale.dtype(), "layer_norm_modulate: shift {} and scale {} must share one dtype",
                 shift.describe(), scale.describe());
  Tensor y = m.alloc(x.shape(), m.opt.act_dtype, "layer_norm_modulate");
  cuda::layer_norm_modulate(m.ctx, x.raw(), x.dtype(), shift.raw(), shift.dtype(), scale.raw(), scale.dtype(), y.raw(),
                            y.dtype(), x.rows(), x.cols(), eps);
  return y;
}

Tensor CudaBackend::l2_normalize(const Tensor& x, const Tensor& gamma, float scale) {
  Impl& m = *impl_;
  expect_float("l2_normalize", x, "x");
  expect_float("l2_normalize", gamma, "gamma");
  op_shapes::row_vector("l2_normalize", x, gamma, "gamma");
  Tensor y = m.alloc(x.shape(), m.opt.act_dtype, "l2_normalize");
  cuda::l2_normalize(m.ctx, x.raw(), x.dtype(), gamma.raw(), gamma.dtype(), y.raw(), y.dtype(), x.rows(), x.cols(),
                     scale);
  return y;
}

Tensor CudaBackend::row_norms(const Tensor& x) {
  expect_float("row_norms", x, "x");
  op_shapes::has_rows("row_norms", x);
  Tensor out = impl_->alloc({x.rows()}, DType::F32, "row_norms");
  if (x.numel() > 0) cuda::row_norms(impl_->ctx, x.raw(), x.dtype(), out.data<float>(), x.rows(), x.cols());
  return out;
}

// ---- element-wise ---------------------------------------------------------------------------

Tensor CudaBackend::silu(const Tensor& x) {
  expect_float("silu", x, "x");
  Tensor y = impl_->alloc(x.shape(), x.dtype(), "silu");
  cuda::silu(impl_->ctx, x.raw(), y.raw(), x.dtype(), x.numel());
  return y;
}

Tensor CudaBackend::gelu_tanh(const Tensor& x) {
  expect_float("gelu_tanh", x, "x");
  Tensor y = impl_->alloc(x.shape(), x.dtype(), "gelu_tanh");
  cuda::gelu_tanh(impl_->ctx, x.raw(), y.raw(), x.dtype(), x.numel());
  return y;
}

Tensor CudaBackend::gelu_erf(const Tensor& x) {
  expect_float("gelu_erf", x, "x");
  Tensor y = impl_->alloc(x.shape(), x.dtype(), "gelu_erf");
  cuda::gelu_erf(impl_->ctx, x.raw(), y.raw(), x.dtype(), x.numel());
  return y;
}

Tensor CudaBackend::silu_mul(const Tensor& gate, const Tensor& up) {
  expect_float("silu_mul", gate, "gate");
  expect_float("silu_mul", up, "up");
  op_shapes::same_shape("silu_mul", gate, up);
  Tensor y = impl_->alloc(gate.shape(), gate.dtype(), "silu_mul");
  cuda::silu_mul(impl_->ctx, gate.raw(), gate.dtype(), up.raw(), up.dtype(), y.raw(), gate.numel());
  return y;
}

void CudaBackend::add_(Tensor& x, const Tensor& y) {
  expect_float("add_", x, "x");
  expect_float("add_", y, "y");
  const bool row_vector = op_shapes::same_shape_or_row_vector("add_", x, y);
  cuda::add_inplace(impl_->ctx, x.raw(), x.dtype(), y.raw(), y.dtype(), x.numel(), row_vector ? x.cols() : x.numel());
}

void CudaBackend::gated_add_(Tensor& x, const Tensor& gate, const Tensor& y) {
  expect_float("gated_add_", x, "x");
  expect_float("gated_add_", gate, "gate");
  expect_float("gated_add_", y, "y");
  op_shapes::same_shape("gated_add_", x, y);
  op_shapes::row_vector("gated_add_", x, gate, "gate");
  cuda::gated_add_inplace(impl_->ctx, x.raw(), x.dtype(), gate.raw(), gate.dtype(), y.raw(), y.dtype(), x.rows(),
                          x.cols());
}

void CudaBackend::clamp_(Tensor& x, float lo, float hi) {
  expect_float("clamp_", x, "x");
  cuda::clamp_inplace(impl_->ctx, x.raw(), x.dtype(), x.numel(), lo, hi);
}

// ---- positions ------------------------------------------------------------------------------

namespace {
void check_rope(const char* op, const Tensor& x, const Tensor& cos, const Tensor& sin) {
  expect_float(op, x, "x");
  expect_cuda(op, cos, "cos");
  expect_cuda(op, sin, "sin");
  op_shapes::rope(op, x, cos, sin);
}
}  // namespace

void CudaBackend::rope_interleaved_(Tensor& x, const Tensor& cos, const Tensor& sin) {
  check_rope("rope_interleaved_", x, cos, sin);
  cuda::rope_inplace(impl_->ctx, x.raw(), x.dtype(), cos.data<float>(), sin.data<float>(), x.dim(0), x.dim(1),
                     x.dim(2), true);
}

void CudaBackend::rope_neox_(Tensor& x, const Tensor& cos, const Tensor& sin) {
  check_rope("rope_neox_", x, cos, sin);
  cuda::rope_inplace(impl_->ctx, x.raw(), x.dtype(), cos.data<float>(), sin.data<float>(), x.dim(0), x.dim(1),
                     x.dim(2), false);
}

void CudaBackend::rms_norm_rope(const Tensor& proj, const Tensor& weight, const Tensor& cos, const Tensor& sin,
                                float eps, const Tensor& out) {
  const char* op = "rms_norm_rope";
  expect_float(op, out, "out");
  expect_float(op, proj, "proj");
  expect_float(op, weight, "weight");
  expect_cuda(op, cos, "cos");
  expect_cuda(op, sin, "sin");
  const int64_t H = op_shapes::rms_norm_rope(proj, weight, cos, sin, out);
  cuda::rms_norm_rope(impl_->ctx, proj.raw(), proj.dtype(), weight.raw(), weight.dtype(), cos.data<float>(),
                      sin.data<float>(), out.raw(), out.dtype(), proj.rows(), H, weight.numel(), eps);
}

Tensor CudaBackend::gated_add_layer_norm_modulate_(Tensor& x, const Tensor& gate, const Tensor& y, const Tensor& shift,
                                                   const Tensor& scale, float eps) {
  Impl& m = *impl_;
  const char* op = "gated_add_layer_norm_modulate_";
  expect_float(op, x, "x");
  expect_float(op, gate, "gate");
  expect_float(op, y, "y");
  expect_float(op, shift, "shift");
  expect_float(op, scale, "scale");
  // The kernel keeps the residual stream in f32 and reads gate, shift and scale as one dtype;
  // anything else takes the two-op path (same result, one more pass).
  if (x.dtype() != DType::F32 || gate.dtype() != shift.dtype() || shift.dtype() != scale.dtype())
    return Backend::gated_add_layer_norm_modulate_(x, gate, y, shift, scale, eps);
  op_shapes::same_shape(op, x, y);
  op_shapes::row_vector(op, x, gate, "gate");
  op_shapes::row_vector(op, x, shift, "shift");
  op_shapes::row_vector(op, x, scale, "scale");
  Tensor out = m.alloc(x.shape(), m.opt.act_dtype, op);
  cuda::gated_add_layer_norm_modulate(m.ctx, x.data<float>(), gate.raw(), y.raw(), y.dtype(), shift.raw(),
                                      scale.raw(), shift.dtype(), out.raw(), out.dtype(), x.rows(), x.cols(), eps);
  return out;
}

// ---- gathers and resampling -----------------------------------------------------------------

Tensor CudaBackend::embedding(const Tensor& table, const Tensor& ids) {
  Impl& m = *impl_;
  expect_float("embedding", table, "table");
  op_shapes::embedding(table, ids);
  const int64_t L = ids.dim(0), D = table.dim(1);
  Tensor out = m.alloc({L, D}, DType::F32, "embedding");
  if (L == 0) return out;
  Tensor ids_dev = upload(ids, DType::I64);
  cuda::embedding(m.ctx, table.raw(), table.dtype(), ids_dev.data<int64_t>(), out.data<float>(), L, D);
  return out;
}

Tensor CudaBackend::upsample_nearest2x(const Tensor& x) {
  expect_float("upsample_nearest2x", x, "x");
  op_shapes::image_hwc("upsample_nearest2x", x);
  const int64_t H = x.dim(0), W = x.dim(1), C = x.dim(2);
  Tensor y = impl_->alloc({2 * H, 2 * W, C}, x.dtype(), "upsample_nearest2x");
  if (C > 0) cuda::upsample_nearest2x(impl_->ctx, x.raw(), y.raw(), x.dtype(), H, W, C);
  return y;
}

// ---- the sampler ----------------------------------------------------------------------------

void CudaBackend::axpy_(Tensor& x, float alpha, const Tensor& y) {
  expect_cuda("axpy_", x, "x");
  expect_float("axpy_", y, "y");
  DITBATCH_CHECK(x.dtype() == DType::F32, "axpy_: x {} must be f32", x.describe());
  op_shapes::same_shape("axpy_", x, y);
  cuda::axpy_inplace(impl_->ctx, x.data<float>(), alpha, y.raw(), y.dtype(), x.numel());
}

void CudaBackend::div_(Tensor& x, const Tensor& y) {
  expect_cuda("div_", x, "x");
  expect_cuda("div_", y, "y");
  DITBATCH_CHECK(x.dtype() == DType::F32 && y.dtype() == DType::F32, "div_: x {} and y {} must be f32", x.describe(),
                 y.describe());
  const bool row_vector = op_shapes::same_shape_or_row_vector("div_", x, y);
  cuda::div_inplace(impl_->ctx, x.data<float>(), y.data<float>(), x.numel(), row_vector ? x.cols() : x.numel());
}

void CudaBackend::scale_rows_(Tensor& x, const Tensor& s) {
  expect_cuda("scale_rows_", x, "x");
  expect_cuda("scale_rows_", s, "s");
  DITBATCH_CHECK(x.dtype() == DType::F32 && s.dtype() == DType::F32, "scale_rows_: x {} and s {} must be f32",
                 x.describe(), s.describe());
  op_shapes::per_row("scale_rows_", x, s, "s");
  cuda::scale_rows_inplace(impl_->ctx, x.data<float>(), s.data<float>(), x.rows(), x.cols());
}

// ---- factories ------------------------------------------------------------------------------

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options, const Log& log) {
  return std::make_unique<CudaBackend>(options, log);
}

std::unique_ptr<Backend> make_cuda_backend(int device, const Log& log) {
  return make_cuda_backend(CudaBackendOptions::from_env(device), log);
}

// ---- layout and images ----------------------------------------------------------------------

Tensor CudaBackend::permute(const Tensor& x, const std::vector<int64_t>& dims) {
  expect_cuda("permute", x, "x");
  const auto [out_shape, in_strides] = op_shapes::permute(x, dims);
  Tensor out = impl_->alloc(out_shape, x.dtype(), "permute");
  cuda::permute(impl_->ctx, x.raw(), out.raw(), dtype_size(x.dtype()), out_shape.data(), in_strides.data(),
                static_cast<int>(x.rank()));
  return out;
}

void CudaBackend::scale_shift_(Tensor& x, float scale, float shift) {
  expect_cuda("scale_shift_", x, "x");
  DITBATCH_CHECK(x.dtype() == DType::F32, "scale_shift_: x {} must be f32", x.describe());
  cuda::scale_shift_inplace(impl_->ctx, x.data<float>(), scale, shift, x.numel());
}

Tensor CudaBackend::to_u8(const Tensor& x) {
  expect_cuda("to_u8", x, "x");
  DITBATCH_CHECK(x.dtype() == DType::F32, "to_u8: x {} must be f32", x.describe());
  Tensor out = impl_->alloc(x.shape(), DType::U8, "to_u8");
  cuda::to_u8(impl_->ctx, x.data<float>(), out.data<uint8_t>(), x.numel());
  return out;
}

int64_t CudaBackend::count_nonfinite(const Tensor& x) {
  expect_float("count_nonfinite", x, "x");
  Tensor count = impl_->alloc({1}, DType::I64, "count_nonfinite");
  cuda::count_nonfinite(impl_->ctx, x.raw(), x.dtype(), x.numel(), count.data<int64_t>());
  return to_host(count).data<int64_t>()[0];
}

}  // namespace ditbatch
