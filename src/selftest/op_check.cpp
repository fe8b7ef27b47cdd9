#include "selftest/op_check.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <set>

#include "core/error.h"
#include "cpu/cpu_backend.h"

namespace ditbatch::selftest {

namespace {

bool is_attention(const std::string& name) { return name.rfind("attention", 0) == 0; }
bool is_plain_attention(const std::string& name) { return name.rfind("attention_Lq", 0) == 0; }

// The bound on nmse(backend, CPU): fp32 arithmetic in another order, or one bf16 rounding of
// the result (mean square relative error ulp^2/12: ~2.5e-6), with an 8x margin.
double bound_vs_cpu(DType out_dtype) { return out_dtype == DType::BF16 ? 2e-5 : 1e-9; }
// Attention in bf16 against the CPU (the rule against float64 is the sharp check).
constexpr double kBf16AttentionVsCpu = 1e-4;

// The case's host inputs as a backend of activation dtype `act` sees them.
std::vector<Tensor> inputs_as_seen(const OpCase& c, DType act) {
  std::vector<Tensor> out;
  for (const auto& in : c.inputs) {
    const bool rounded = act == DType::BF16 && (in.kind == InputKind::Activation || in.kind == InputKind::Weight);
    out.push_back(rounded ? round_bf16(in.host) : in.host);
  }
  return out;
}

Tensor run_on_cpu(const OpCase& c, const std::vector<Tensor>& hosts) {
  CpuBackend cpu;
  std::vector<Tensor> in;
  for (const auto& h : hosts) in.push_back(h.dtype() == DType::I64 ? h : h.clone());
  return cpu.to_host_f32(c.run(cpu, in));
}

int64_t count_nonfinite_host(const Tensor& t) {
  int64_t n = 0;
  for (int64_t i = 0; i < t.numel(); ++i) n += !std::isfinite(t.data<float>()[i]);
  return n;
}

void check_bound(OpCheck& r) {
  if (!(r.error <= r.bound)) r.failure = fmt::format("nmse {:.3g} vs {} above the bound {:.3g}", r.error, r.reference, r.bound);
}

}  // namespace

Tensor round_bf16(const Tensor& host) {
  Tensor out = host.to_f32().clone();
  float* p = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = bf16_to_f32(f32_to_bf16(p[i]));
  return out;
}

double nmse(const Tensor& out, const std::vector<double>& ref) {
  const Tensor o = out.to_f32();
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = o.data<float>()[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? num / den : num;
}

double nmse(const Tensor& out, const Tensor& ref) {
  const Tensor r = ref.to_f32();
  std::vector<double> values(r.data<float>(), r.data<float>() + r.numel());
  return nmse(out, values);
}

std::vector<double> naive_bf16_attention(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal) {
  const int64_t Lq = q.dim(0), H = q.dim(1), Dh = q.dim(2), Lk = k.dim(0), Hkv = k.dim(1);
  auto r = [](double x) { return static_cast<double>(bf16_to_f32(f32_to_bf16(static_cast<float>(x)))); };
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  std::vector<double> out(static_cast<size_t>(Lq * H * Dh)), p(static_cast<size_t>(Lk));
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / Hkv);
    for (int64_t i = 0; i < Lq; ++i) {
      const int64_t n = causal ? i + 1 : Lk;
      double mx = -1e300;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t d = 0; d < Dh; ++d) s += static_cast<double>(qp[(i * H + h) * Dh + d]) * kp[(j * Hkv + g) * Dh + d];
        p[static_cast<size_t>(j)] = r(r(s) * r(scale));
        mx = std::max(mx, p[static_cast<size_t>(j)]);
      }
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += (p[static_cast<size_t>(j)] = static_cast<float>(std::exp(p[static_cast<size_t>(j)] - mx)));
      for (int64_t j = 0; j < n; ++j) p[static_cast<size_t>(j)] = r(static_cast<float>(p[static_cast<size_t>(j)] / sum));
      for (int64_t d = 0; d < Dh; ++d) {
        double o = 0;
        for (int64_t j = 0; j < n; ++j) o += p[static_cast<size_t>(j)] * vp[(j * Hkv + g) * Dh + d];
        out[static_cast<size_t>((i * H + h) * Dh + d)] = r(o);
      }
    }
  }
  return out;
}

OpCheck check_op_case(Backend& be, const OpCase& c) {
  OpCheck r;
  r.name = c.name;
  r.mode = dtype_name(be.act_dtype());
  const bool on_cpu = be.device() == Device::Host;
  r.reference = on_cpu ? "float64" : "cpu";
  Tensor out;
  DType out_dtype = DType::F32;
  try {
    std::vector<Tensor> inputs = upload_inputs(be, c);
    Tensor result = c.run(be, inputs);
    if (result.device() != be.device()) fail("{} returned a tensor that is not on {}", c.name, be.name());
    out_dtype = result.dtype();
    out = be.to_host_f32(result);
  } catch (const std::exception& e) {
    r.failure = fmt::format("{} failed: {}", be.name(), e.what());
    return r;
  }
  r.nonfinite = count_nonfinite_host(out);

  if (on_cpu) {
    std::vector<Tensor> host;
    for (const auto& in : c.inputs) host.push_back(in.host);
    const std::vector<double> ref = c.reference(host);
    if (out.numel() != static_cast<int64_t>(ref.size())) {
      r.failure = fmt::format("{} values, the reference has {}", out.numel(), ref.size());
      return r;
    }
    double den = 0;
    for (double x : ref) den += x * x;
    if (den == 0) {
      r.failure = "the reference is all zeros: the case cannot fail";
      return r;
    }
    r.error = nmse(out, ref);
    r.bound = c.nmse_bound;
  } else {
    const std::vector<Tensor> seen = inputs_as_seen(c, be.act_dtype());
    const Tensor cpu = run_on_cpu(c, seen);
    if (out.shape() != cpu.shape()) {
      r.failure = fmt::format("shape {} where the CPU gives {}", shape_str(out.shape()), shape_str(cpu.shape()));
      return r;
    }
    r.error = nmse(out, cpu);
    const bool bf16 = be.act_dtype() == DType::BF16;
    r.bound = is_attention(c.name) && bf16 ? kBf16AttentionVsCpu : bound_vs_cpu(out_dtype);
    if (is_plain_attention(c.name) && bf16) {
      const std::vector<double> ref = c.reference(seen);
      const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(seen[0].dim(2))));
      const bool causal = c.name.find("_causal") != std::string::npos;
      const std::vector<double> naive = naive_bf16_attention(seen[0], seen[1], seen[2], scale, causal);
      r.error_vs_f64 = nmse(out, ref);
      r.naive_bf16_vs_f64 = nmse(Tensor::host_f32(out.shape(), std::vector<float>(naive.begin(), naive.end())), ref);
      if (!(r.error_vs_f64 <= 4.0 * r.naive_bf16_vs_f64 + 1e-9)) {
        r.failure = fmt::format("FlashAttention's rule: nmse {:.3g} vs float64, more than 4x naive bf16's {:.3g}",
                                r.error_vs_f64, r.naive_bf16_vs_f64);
        return r;
      }
    }
  }
  if (r.nonfinite > 0) {
    r.failure = fmt::format("{} NaN/Inf (or unwritten) element(s) in the output", r.nonfinite);
    return r;
  }
  check_bound(r);
  return r;
}

std::string op_family(const std::string& case_name) {
  std::string family;
  size_t start = 0;
  while (start <= case_name.size()) {
    const size_t end = std::min(case_name.find('_', start), case_name.size());
    const std::string token = case_name.substr(start, end - start);
    const bool shape_token = !token.empty() && (std::isdigit(static_cast<unsigned char>(token[0])) ||
                                                (token.size() > 1 && std::isupper(static_cast<unsigned char>(token[0])) &&
                                                 std::isdigit(static_cast<unsigned char>(token[token.size() - 1]))));
    if (shape_token) break;
    family += (family.empty() ? "" : "_") + token;
    start = end + 1;
  }
  return family;
}

std::vector<OpCase> quick_op_cases() {
  std::vector<OpCase> out;
  std::set<std::string> seen;
  for (auto& c : all_op_cases())
    if (seen.insert(op_family(c.name)).second) out.push_back(std::move(c));
  return out;
}

}  // namespace ditbatch::selftest
