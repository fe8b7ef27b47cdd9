#include "selftest/op_cases.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "pipeline/postprocess.h"
#include "selftest/random_inputs.h"

namespace ditbatch::selftest {

namespace {

double at(const Tensor& t, int64_t i) { return static_cast<double>(t.data<float>()[i]); }

Tensor ids_tensor(const std::vector<int64_t>& ids) {
  Tensor t = Tensor::host({static_cast<int64_t>(ids.size())}, DType::I64);
  std::copy(ids.begin(), ids.end(), t.data<int64_t>());
  return t;
}

OpCase linear_case(int64_t M, int64_t K, int64_t N, bool bias, uint32_t seed) {
  OpCase c;
  c.name = fmt::format("linear_M{}_K{}_N{}{}", M, K, N, bias ? "_bias" : "");
  c.nmse_bound = 1e-12;
  c.inputs = {{random_tensor({M, K}, seed), InputKind::Activation},
              {random_tensor({N, K}, seed + 1, 0.5f), InputKind::Weight},
              {random_tensor({N}, seed + 2), InputKind::Weight}};
  c.run = [bias](Backend& be, std::vector<Tensor>& in) { return be.linear(in[0], in[1], bias ? &in[2] : nullptr); };
  c.reference = [M, K, N, bias](const std::vector<Tensor>& in) {
    std::vector<double> y(static_cast<size_t>(M * N));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = bias ? at(in[2], j) : 0.0;
        for (int64_t k = 0; k < K; ++k) s += at(in[0], i * K + k) * at(in[1], j * K + k);
        y[static_cast<size_t>(i * N + j)] = s;
      }
    return y;
  };
  return c;
}

// conv2d_3x3 (stride 1, zero padding 1) or conv2d_3x3_stride2 (ZeroPad2d(0, 1, 0, 1), stride 2):
// output (oy, ox) reads input row oy * stride + ky - pad, zero outside x.
OpCase conv_case(int64_t H, int64_t W, int64_t Cin, int64_t Cout, int64_t stride, uint32_t seed) {
  OpCase c;
  c.name = fmt::format("conv2d_3x3{}_{}x{}_{}to{}", stride == 2 ? "_stride2" : "", H, W, Cin, Cout);
  c.nmse_bound = 1e-12;
  c.inputs = {{random_tensor({H, W, Cin}, seed), InputKind::Activation},
              {random_tensor({Cout, 9 * Cin}, seed + 1, 0.3f), InputKind::Weight},
              {random_tensor({Cout}, seed + 2), InputKind::Weight}};
  c.run = [stride](Backend& be, std::vector<Tensor>& in) {
    return stride == 2 ? be.conv2d_3x3_stride2(in[0], in[1], in[2]) : be.conv2d_3x3(in[0], in[1], in[2]);
  };
  c.reference = [H, W, Cin, Cout, stride](const std::vector<Tensor>& in) {
    // torch's output size: (H + pad_before + pad_after - 3) / stride + 1
    const int64_t pad = stride == 2 ? 0 : 1, pad_after = 1;
    const int64_t Ho = (H + pad + pad_after - 3) / stride + 1, Wo = (W + pad + pad_after - 3) / stride + 1;
    std::vector<double> y(static_cast<size_t>(Ho * Wo * Cout));
    for (int64_t oy = 0; oy < Ho; ++oy)
      for (int64_t ox = 0; ox < Wo; ++ox)
        for (int64_t co = 0; co < Cout; ++co) {
          double s = at(in[2], co);
          for (int64_t ky = 0; ky < 3; ++ky)
            for (int64_t kx = 0; kx < 3; ++kx) {
              const int64_t iy = oy * stride + ky - pad, ix = ox * stride + kx - pad;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              for (int64_t ci = 0; ci < Cin; ++ci)
                s += at(in[0], (iy * W + ix) * Cin + ci) * at(in[1], co * 9 * Cin + (ky * 3 + kx) * Cin + ci);
            }
          y[static_cast<size_t>((oy * Wo + ox) * Cout + co)] = s;
        }
    return y;
  };
  return c;
}

OpCase attention_case(int64_t Lq, int64_t Lk, int64_t H, int64_t Hkv, int64_t Dh, bool causal, uint32_t seed) {
  OpCase c;
  c.name = fmt::format("attention_Lq{}_Lk{}_H{}_Hkv{}_D{}{}", Lq, Lk, H, Hkv, Dh, causal ? "_causal" : "");
  c.nmse_bound = 1e-11;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));
  // Scores of a few units: a softmax that is neither flat nor one-hot.
  c.inputs = {{random_tensor({Lq, H, Dh}, seed, 2.0f), InputKind::Activation},
              {random_tensor({Lk, Hkv, Dh}, seed + 1, 2.0f), InputKind::Activation},
              {random_tensor({Lk, Hkv, Dh}, seed + 2), InputKind::Activation}};
  c.run = [scale, causal](Backend& be, std::vector<Tensor>& in) { return be.attention(in[0], in[1], in[2], scale, causal); };
  c.reference = [=](const std::vector<Tensor>& in) { return attention_f64(in[0], in[1], in[2], scale, causal); };
  return c;
}

// An op applied element by element (or row by row) with a float64 formula.
OpCase unary_case(const std::string& name, Shape shape, float scale, uint32_t seed,
                  std::function<Tensor(Backend&, Tensor&)> run, std::function<double(double)> f) {
  OpCase c;
  c.name = name;
  c.nmse_bound = 1e-12;
  c.inputs = {{random_tensor(shape, seed, scale), InputKind::Activation}};
  c.run = [run](Backend& be, std::vector<Tensor>& in) { return run(be, in[0]); };
  c.reference = [f](const std::vector<Tensor>& in) {
    std::vector<double> y(static_cast<size_t>(in[0].numel()));
    for (int64_t i = 0; i < in[0].numel(); ++i) y[static_cast<size_t>(i)] = f(at(in[0], i));
    return y;
  };
  return c;
}

// Per-row normalisation ops: reference(row values, row index) -> normalised row.
OpCase row_case(const std::string& name, int64_t R, int64_t C, std::vector<OpInput> extra,
                std::function<Tensor(Backend&, std::vector<Tensor>&)> run,
                std::function<void(const std::vector<Tensor>&, int64_t, std::vector<double>&)> row_ref, uint32_t seed) {
  OpCase c;
  c.name = name;
  c.nmse_bound = 1e-12;
  c.inputs = {{random_tensor({R, C}, seed, 3.0f), InputKind::Fp32}};
  for (auto& e : extra) c.inputs.push_back(e);
  c.run = run;
  c.reference = [R, C, row_ref](const std::vector<Tensor>& in) {
    std::vector<double> y(static_cast<size_t>(R * C)), row(static_cast<size_t>(C));
    for (int64_t r = 0; r < R; ++r) {
      row_ref(in, r, row);
      std::copy(row.begin(), row.end(), y.begin() + r * C);
    }
    return y;
  };
  return c;
}

OpCase rope_case(bool interleaved, int64_t L, int64_t H, int64_t Dh, uint32_t seed) {
  OpCase c;
  c.name = fmt::format("rope_{}_L{}_H{}_D{}", interleaved ? "interleaved" : "neox", L, H, Dh);
  c.nmse_bound = 1e-13;
  std::vector<float> angles = random_floats(static_cast<size_t>(L * Dh / 2), seed + 1, 50.0f);
  std::vector<float> cs(angles.size()), sn(angles.size());
  for (size_t i = 0; i < angles.size(); ++i) cs[i] = std::cos(angles[i]), sn[i] = std::sin(angles[i]);
  c.inputs = {{random_tensor({L, H, Dh}, seed), InputKind::Activation},
              {Tensor::host_f32({L, Dh / 2}, cs), InputKind::Fp32},
              {Tensor::host_f32({L, Dh / 2}, sn), InputKind::Fp32}};
  c.run = [interleaved](Backend& be, std::vector<Tensor>& in) {
    if (interleaved) be.rope_interleaved_(in[0], in[1], in[2]);
    else be.rope_neox_(in[0], in[1], in[2]);
    return in[0];
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    std::vector<double> y(static_cast<size_t>(L * H * Dh));
    const int64_t half = Dh / 2;
    for (int64_t l = 0; l < L; ++l)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t m = 0; m < half; ++m) {
          const int64_t a_i = interleaved ? 2 * m : m, b_i = interleaved ? 2 * m + 1 : m + half;
          const double a = at(in[0], (l * H + h) * Dh + a_i), b = at(in[0], (l * H + h) * Dh + b_i);
          const double co = at(in[1], l * half + m), si = at(in[2], l * half + m);
          y[static_cast<size_t>((l * H + h) * Dh + a_i)] = a * co - b * si;
          y[static_cast<size_t>((l * H + h) * Dh + b_i)] = a * si + b * co;
        }
    return y;
  };
  return c;
}

// The fused ops (Backend's defaults on the CPU, one pass on a GPU), each against float64.

double gelu_tanh_f64(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

OpCase linear_gelu_case(int64_t M, int64_t K, int64_t N, uint32_t seed) {
  OpCase c = linear_case(M, K, N, true, seed);
  c.name = fmt::format("linear_gelu_M{}_K{}_N{}", M, K, N);
  c.run = [](Backend& be, std::vector<Tensor>& in) { return be.linear_gelu(in[0], in[1], in[2]); };
  auto linear_ref = c.reference;
  c.reference = [linear_ref](const std::vector<Tensor>& in) {
    std::vector<double> y = linear_ref(in);
    for (double& v : y) v = gelu_tanh_f64(v);
    return y;
  };
  return c;
}

// Turns case c (whose result is a new [rows, width] tensor) into its `out` form: one more
// input, a random dst [dst_rows, width], whose rows [row, row + rows) run_into passes as out.
// The reference is dst with c's reference placed there: the other rows must keep their values.
void into_random_dst(OpCase& c, int64_t row, int64_t dst_rows, int64_t width, uint32_t seed,
                     std::function<void(Backend&, std::vector<Tensor>&)> run_into) {
  const size_t dst = c.inputs.size();
  c.inputs.push_back({random_tensor({dst_rows, width}, seed, 7.0f), InputKind::Activation});
  c.run = [run_into, dst](Backend& be, std::vector<Tensor>& in) {
    run_into(be, in);
    return in[dst];
  };
  auto plain = c.reference;
  c.reference = [plain, dst, row, width](const std::vector<Tensor>& in) {
    std::vector<double> y(static_cast<size_t>(in[dst].numel()));
    for (size_t i = 0; i < y.size(); ++i) y[i] = at(in[dst], static_cast<int64_t>(i));
    const std::vector<double> result = plain(in);
    std::copy(result.begin(), result.end(), y.begin() + row * width);
    return y;
  };
}

// linear() into rows [row, row + M) of a random dst [M + 5, N].
OpCase linear_rows_case(int64_t M, int64_t K, int64_t N, int64_t row, uint32_t seed) {
  OpCase c = linear_case(M, K, N, true, seed);
  c.name = fmt::format("linear_rows_M{}_K{}_N{}_row{}", M, K, N, row);
  into_random_dst(c, row, M + 5, N, seed + 3, [row, M](Backend& be, std::vector<Tensor>& in) {
    be.linear(in[0], in[1], &in[2], in[3].slice0(row, row + M));
  });
  return c;
}

// attention() into rows [row, row + Lq) of a random dst [Lq + 5, H * Dh].
OpCase attention_rows_case(int64_t Lq, int64_t Lk, int64_t H, int64_t Dh, int64_t row, uint32_t seed) {
  OpCase c = attention_case(Lq, Lk, H, H, Dh, false, seed);
  c.name = fmt::format("attention_rows_Lq{}_Lk{}_H{}_D{}_row{}", Lq, Lk, H, Dh, row);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));
  into_random_dst(c, row, Lq + 5, H * Dh, seed + 3, [=](Backend& be, std::vector<Tensor>& in) {
    be.attention(in[0], in[1], in[2], scale, false, in[3].slice0(row, row + Lq).view({Lq, H, Dh}));
  });
  return c;
}

// attention() of q [Lq], k and v [Lk] with `spare` random rows after each (never keys: a
// backend that pads must mask them), into rows [row, row + Lq) of a random dst with `spare`
// rows after them that the backend may overwrite, then 3 rows it must not touch. The result
// is dst without the spare rows. On a GPU with cuDNN >= 9.15 this is the padded SDPA path.
OpCase attention_spare_case(int64_t Lq, int64_t Lk, int64_t H, int64_t Dh, int64_t row, int64_t spare, uint32_t seed) {
  OpCase c;
  c.name = fmt::format("attention_spare_Lq{}_Lk{}_H{}_D{}_row{}_spare{}", Lq, Lk, H, Dh, row, spare);
  c.nmse_bound = 1e-11;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));
  const int64_t D = H * Dh, tail = 3, dst_rows = row + Lq + spare + tail;
  c.inputs = {{random_tensor({Lq + spare, H, Dh}, seed, 2.0f), InputKind::Activation},
              {random_tensor({Lk + spare, H, Dh}, seed + 1, 2.0f), InputKind::Activation},
              {random_tensor({Lk + spare, H, Dh}, seed + 2), InputKind::Activation},
              {random_tensor({dst_rows, D}, seed + 3, 7.0f), InputKind::Activation}};
  c.run = [=](Backend& be, std::vector<Tensor>& in) {
    be.attention(in[0].slice0(0, Lq), in[1].slice0(0, Lk), in[2].slice0(0, Lk), scale, false,
                 in[3].slice0(row, row + Lq).view({Lq, H, Dh}), spare);
    Tensor kept = be.empty({row + Lq + tail, D}, in[3].dtype());  // dst less its spare rows
    be.copy_(kept.slice0(0, row + Lq), in[3].slice0(0, row + Lq));
    be.copy_(kept.slice0(row + Lq, row + Lq + tail), in[3].slice0(row + Lq + spare, dst_rows));
    return kept;
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    std::vector<double> y;
    for (int64_t i = 0; i < row * D; ++i) y.push_back(at(in[3], i));
    const std::vector<double> o =
        attention_f64(in[0].slice0(0, Lq), in[1].slice0(0, Lk), in[2].slice0(0, Lk), scale, false);
    y.insert(y.end(), o.begin(), o.end());
    for (int64_t i = (row + Lq + spare) * D; i < dst_rows * D; ++i) y.push_back(at(in[3], i));
    return y;
  };
  return c;
}

// proj [T, H * Dh] normalised per head, rotated, into rows [row, row + T) of a random dst.
OpCase rms_norm_rope_rows_case(int64_t T, int64_t H, int64_t Dh, int64_t row, uint32_t seed) {
  OpCase c;
  c.name = fmt::format("rms_norm_rope_rows_T{}_H{}_D{}_row{}", T, H, Dh, row);
  c.nmse_bound = 1e-12;
  const int64_t half = Dh / 2, D = H * Dh, rows = T + row + 3;
  std::vector<float> angles = random_floats(static_cast<size_t>(T * half), seed + 1, 50.0f);
  std::vector<float> cs(angles.size()), sn(angles.size());
  for (size_t i = 0; i < angles.size(); ++i) cs[i] = std::cos(angles[i]), sn[i] = std::sin(angles[i]);
  c.inputs = {{random_tensor({rows, D}, seed + 2, 5.0f), InputKind::Activation},
              {random_tensor({T, D}, seed + 3, 30.0f), InputKind::Activation},
              {random_tensor({Dh}, seed + 4), InputKind::Weight},
              {Tensor::host_f32({T, half}, cs), InputKind::Fp32},
              {Tensor::host_f32({T, half}, sn), InputKind::Fp32}};
  c.run = [row, T](Backend& be, std::vector<Tensor>& in) {
    be.rms_norm_rope(in[1], in[2], in[3], in[4], 1e-6f, in[0].slice0(row, row + T));
    return in[0];
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    std::vector<double> y(static_cast<size_t>(rows * D)), n(static_cast<size_t>(Dh));
    for (int64_t i = 0; i < rows * D; ++i) y[static_cast<size_t>(i)] = at(in[0], i);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t base = t * D + h * Dh;
        double ss = 0;
        for (int64_t d = 0; d < Dh; ++d) ss += at(in[1], base + d) * at(in[1], base + d);
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(Dh) + 1e-6);
        for (int64_t d = 0; d < Dh; ++d) n[static_cast<size_t>(d)] = at(in[1], base + d) * inv * at(in[2], d);
        double* out = y.data() + (row + t) * D + h * Dh;
        for (int64_t m = 0; m < half; ++m) {
          const double a = n[static_cast<size_t>(2 * m)], b = n[static_cast<size_t>(2 * m + 1)];
          const double co = at(in[3], t * half + m), si = at(in[4], t * half + m);
          out[2 * m] = a * co - b * si;
          out[2 * m + 1] = a * si + b * co;
        }
      }
    return y;
  };
  return c;
}

// x += gate * y then LN(x) * (1 + scale) + shift; the case checks either the returned LN output
// or the updated residual x. x is large (the residual stream reaches ~1e7 in Qwen-Image).
OpCase gated_add_ln_case(bool check_x, int64_t R, int64_t C, uint32_t seed) {
  OpCase c;
  c.name = fmt::format("gated_add_layer_norm_modulate_{}_R{}_C{}", check_x ? "x" : "out", R, C);
  c.nmse_bound = 1e-12;
  c.inputs = {{random_tensor({R, C}, seed, 1000.0f), InputKind::Fp32},
              {random_tensor({C}, seed + 1), InputKind::Fp32},
              {random_tensor({R, C}, seed + 2, 50.0f), InputKind::Fp32},
              {random_tensor({C}, seed + 3), InputKind::Fp32},
              {random_tensor({C}, seed + 4), InputKind::Fp32}};
  c.run = [check_x](Backend& be, std::vector<Tensor>& in) {
    Tensor out = be.gated_add_layer_norm_modulate_(in[0], in[1], in[2], in[3], in[4], 1e-6f);
    return check_x ? in[0] : out;
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    std::vector<double> x(static_cast<size_t>(R * C)), y(x.size());
    for (int64_t i = 0; i < R * C; ++i) x[static_cast<size_t>(i)] = at(in[0], i) + at(in[1], i % C) * at(in[2], i);
    if (check_x) return x;
    for (int64_t r = 0; r < R; ++r) {
      double mean = 0, var = 0;
      for (int64_t k = 0; k < C; ++k) mean += x[static_cast<size_t>(r * C + k)];
      mean /= static_cast<double>(C);
      for (int64_t k = 0; k < C; ++k) var += (x[static_cast<size_t>(r * C + k)] - mean) * (x[static_cast<size_t>(r * C + k)] - mean);
      const double rstd = 1.0 / std::sqrt(var / static_cast<double>(C) + 1e-6);
      for (int64_t k = 0; k < C; ++k)
        y[static_cast<size_t>(r * C + k)] = (x[static_cast<size_t>(r * C + k)] - mean) * rstd * (1.0 + at(in[4], k)) + at(in[3], k);
    }
    return y;
  };
  return c;
}

}  // namespace

std::vector<double> attention_f64(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal) {
  const int64_t Lq = q.dim(0), H = q.dim(1), Dh = q.dim(2), Lk = k.dim(0), Hkv = k.dim(1);
  std::vector<double> y(static_cast<size_t>(Lq * H * Dh));
  std::vector<double> p(static_cast<size_t>(Lk));
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / Hkv);
    for (int64_t i = 0; i < Lq; ++i) {
      const int64_t n = causal ? i + 1 : Lk;
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t d = 0; d < Dh; ++d) s += at(q, (i * H + h) * Dh + d) * at(k, (j * Hkv + g) * Dh + d);
        p[static_cast<size_t>(j)] = s * scale;
        mx = std::max(mx, p[static_cast<size_t>(j)]);
      }
      for (int64_t j = 0; j < n; ++j) sum += (p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - mx));
      for (int64_t d = 0; d < Dh; ++d) {
        double o = 0;
        for (int64_t j = 0; j < n; ++j) o += p[static_cast<size_t>(j)] * at(v, (j * Hkv + g) * Dh + d);
        y[static_cast<size_t>((i * H + h) * Dh + d)] = o / sum;
      }
    }
  }
  return y;
}

std::vector<Tensor> upload_inputs(Backend& be, const OpCase& c) {
  std::vector<Tensor> out;
  for (const auto& in : c.inputs) {
    switch (in.kind) {
      case InputKind::Activation: out.push_back(be.upload(in.host, be.act_dtype())); break;
      case InputKind::Fp32: out.push_back(be.upload(in.host, DType::F32)); break;
      case InputKind::Weight: out.push_back(be.upload_weight(in.host)); break;
      case InputKind::HostIds: out.push_back(in.host); break;
    }
  }
  return out;
}

// x.permute(dims): each input element's output position computed from its own index (the
// opposite direction from the backends, which walk the output).
std::vector<double> permute_f64(const Tensor& x, const std::vector<int64_t>& dims) {
  const int64_t rank = x.rank();
  std::vector<int64_t> out_shape(static_cast<size_t>(rank)), index(static_cast<size_t>(rank));
  for (int64_t k = 0; k < rank; ++k) out_shape[static_cast<size_t>(k)] = x.dim(dims[static_cast<size_t>(k)]);
  const Tensor xf = x.to_f32();
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t e = 0; e < x.numel(); ++e) {
    for (int64_t k = rank - 1, rest = e; k >= 0; rest /= x.dim(k), --k) index[static_cast<size_t>(k)] = rest % x.dim(k);
    int64_t o = 0;
    for (int64_t k = 0; k < rank; ++k) o = o * out_shape[static_cast<size_t>(k)] + index[static_cast<size_t>(dims[static_cast<size_t>(k)])];
    y[static_cast<size_t>(o)] = at(xf, e);
  }
  return y;
}

OpCase permute_case(Shape shape, std::vector<int64_t> dims, InputKind kind, uint32_t seed) {
  OpCase c;
  c.name = fmt::format("permute_{}_to_{}", fmt::join(shape, "x"), fmt::join(dims, ""));
  c.nmse_bound = 0.0;
  c.inputs = {{random_tensor(shape, seed), kind}};
  c.run = [dims](Backend& be, std::vector<Tensor>& in) { return be.permute(in[0], dims); };
  c.reference = [dims](const std::vector<Tensor>& in) { return permute_f64(in[0], dims); };
  return c;
}

std::vector<OpCase> all_op_cases() {
  std::vector<OpCase> cases;
  // GEMMs: odd sizes, one with K larger than a cache block.
  cases.push_back(linear_case(37, 70, 19, true, 1));
  cases.push_back(linear_case(5, 300, 64, false, 2));
  cases.push_back(linear_case(128, 64, 192, true, 3));
  cases.push_back(conv_case(5, 7, 6, 4, 1, 4));
  cases.push_back(conv_case(16, 9, 16, 8, 1, 5));
  // Stride 2: odd and even sides (the padded row or column is read only when the side is odd), the smallest image.
  cases.push_back(conv_case(7, 10, 6, 5, 2, 141));
  cases.push_back(conv_case(12, 9, 16, 8, 2, 144));
  cases.push_back(conv_case(2, 3, 4, 3, 2, 147));
  // Attention: DiT-like (non-causal, keys spanning several blocks), text encoder (causal GQA),
  // VAE (one wide head).
  cases.push_back(attention_case(37, 300, 4, 4, 16, false, 6));
  cases.push_back(attention_case(130, 130, 4, 2, 16, true, 7));
  cases.push_back(attention_case(70, 70, 1, 1, 24, false, 8));
  cases.push_back(attention_case(300, 300, 2, 1, 32, true, 9));

  const int64_t R = 33, C = 48;
  cases.push_back(row_case(
      "rms_norm", R, C, {{random_tensor({C}, 11), InputKind::Weight}},
      [](Backend& be, std::vector<Tensor>& in) { return be.rms_norm(in[0], in[1], 1e-6f); },
      [C](const std::vector<Tensor>& in, int64_t r, std::vector<double>& row) {
        double ss = 0;
        for (int64_t c = 0; c < C; ++c) ss += at(in[0], r * C + c) * at(in[0], r * C + c);
        const double inv = 1.0 / std::sqrt(ss / C + 1e-6);
        for (int64_t c = 0; c < C; ++c) row[static_cast<size_t>(c)] = at(in[0], r * C + c) * inv * at(in[1], c);
      },
      10));
  cases.push_back(row_case(
      "layer_norm_modulate", R, C, {{random_tensor({C}, 12), InputKind::Fp32}, {random_tensor({C}, 13), InputKind::Fp32}},
      [](Backend& be, std::vector<Tensor>& in) { return be.layer_norm_modulate(in[0], in[1], in[2], 1e-6f); },
      [C](const std::vector<Tensor>& in, int64_t r, std::vector<double>& row) {
        double mean = 0, var = 0;
        for (int64_t c = 0; c < C; ++c) mean += at(in[0], r * C + c);
        mean /= C;
        for (int64_t c = 0; c < C; ++c) var += (at(in[0], r * C + c) - mean) * (at(in[0], r * C + c) - mean);
        const double rstd = 1.0 / std::sqrt(var / C + 1e-6);
        for (int64_t c = 0; c < C; ++c)
          row[static_cast<size_t>(c)] = (at(in[0], r * C + c) - mean) * rstd * (1.0 + at(in[2], c)) + at(in[1], c);
      },
      14));
  cases.push_back(row_case(
      "l2_normalize", R, C, {{random_tensor({C}, 15), InputKind::Weight}},
      [](Backend& be, std::vector<Tensor>& in) { return be.l2_normalize(in[0], in[1], 1.7f); },
      [C](const std::vector<Tensor>& in, int64_t r, std::vector<double>& row) {
        double ss = 0;
        for (int64_t c = 0; c < C; ++c) ss += at(in[0], r * C + c) * at(in[0], r * C + c);
        const double n = std::max(std::sqrt(ss), 1e-12);
        for (int64_t c = 0; c < C; ++c)
          row[static_cast<size_t>(c)] = at(in[0], r * C + c) / n * static_cast<double>(1.7f) * at(in[1], c);
      },
      16));
  cases.push_back(unary_case("silu", {17, 29}, 8.0f, 17, [](Backend& be, Tensor& x) { return be.silu(x); },
                             [](double x) { return x / (1.0 + std::exp(-x)); }));
  cases.push_back(unary_case("gelu_tanh", {17, 29}, 6.0f, 18, [](Backend& be, Tensor& x) { return be.gelu_tanh(x); },
                             [](double x) {
                               return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
                             }));
  cases.push_back(unary_case("gelu_erf", {17, 29}, 6.0f, 28, [](Backend& be, Tensor& x) { return be.gelu_erf(x); },
                             [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }));
  cases.push_back(unary_case("clamp_", {17, 29}, 2.0f, 19,
                             [](Backend& be, Tensor& x) {
                               be.clamp_(x, -1.0f, 1.0f);
                               return x;
                             },
                             [](double x) { return std::min(1.0, std::max(-1.0, x)); }));
  {
    OpCase c;
    c.name = "silu_mul";
    c.nmse_bound = 1e-12;
    c.inputs = {{random_tensor({9, 40}, 20, 6.0f), InputKind::Activation}, {random_tensor({9, 40}, 21), InputKind::Activation}};
    c.run = [](Backend& be, std::vector<Tensor>& in) { return be.silu_mul(in[0], in[1]); };
    c.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> y(360);
      for (int64_t i = 0; i < 360; ++i) y[static_cast<size_t>(i)] = at(in[0], i) / (1.0 + std::exp(-at(in[0], i))) * at(in[1], i);
      return y;
    };
    cases.push_back(c);
  }
  {
    OpCase c;
    c.name = "add_";
    c.nmse_bound = 1e-14;
    c.inputs = {{random_tensor({9, 40}, 22), InputKind::Fp32}, {random_tensor({9, 40}, 23), InputKind::Fp32}};
    c.run = [](Backend& be, std::vector<Tensor>& in) {
      be.add_(in[0], in[1]);
      return in[0];
    };
    c.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> y(360);
      for (int64_t i = 0; i < 360; ++i) y[static_cast<size_t>(i)] = at(in[0], i) + at(in[1], i);
      return y;
    };
    cases.push_back(c);
  }
  {
    OpCase c;
    c.name = "gated_add_";
    c.nmse_bound = 1e-14;
    c.inputs = {{random_tensor({9, 40}, 24, 100.0f), InputKind::Fp32},
                {random_tensor({40}, 25), InputKind::Fp32},
                {random_tensor({9, 40}, 26), InputKind::Fp32}};
    c.run = [](Backend& be, std::vector<Tensor>& in) {
      be.gated_add_(in[0], in[1], in[2]);
      return in[0];
    };
    c.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> y(360);
      for (int64_t i = 0; i < 360; ++i) y[static_cast<size_t>(i)] = at(in[0], i) + at(in[1], i % 40) * at(in[2], i);
      return y;
    };
    cases.push_back(c);
  }
  cases.push_back(rope_case(true, 11, 3, 16, 27));
  cases.push_back(rope_case(false, 11, 3, 16, 28));
  {
    OpCase c;
    c.name = "embedding";
    c.nmse_bound = 0.0;
    c.inputs = {{random_tensor({50, 12}, 29), InputKind::Weight}, {ids_tensor({3, 0, 49, 3, 17}), InputKind::HostIds}};
    c.run = [](Backend& be, std::vector<Tensor>& in) { return be.embedding(in[0], in[1]); };
    c.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> y;
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t d = 0; d < 12; ++d) y.push_back(at(in[0], in[1].data<int64_t>()[i] * 12 + d));
      return y;
    };
    cases.push_back(c);
  }
  {
    OpCase c;
    c.name = "upsample_nearest2x";
    c.nmse_bound = 0.0;
    c.inputs = {{random_tensor({3, 5, 4}, 30), InputKind::Activation}};
    c.run = [](Backend& be, std::vector<Tensor>& in) { return be.upsample_nearest2x(in[0]); };
    c.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> y;
      for (int64_t oy = 0; oy < 6; ++oy)
        for (int64_t ox = 0; ox < 10; ++ox)
          for (int64_t ch = 0; ch < 4; ++ch) y.push_back(at(in[0], ((oy / 2) * 5 + ox / 2) * 4 + ch));
      return y;
    };
    cases.push_back(c);
  }
  {
    OpCase c;
    c.name = "row_norms";
    c.nmse_bound = 1e-13;
    c.inputs = {{random_tensor({15, 64}, 31, 3.0f), InputKind::Fp32}};
    c.run = [](Backend& be, std::vector<Tensor>& in) { return be.row_norms(in[0]); };
    c.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> y(15);
      for (int64_t r = 0; r < 15; ++r) {
        double sum_sq = 0;
        for (int64_t k = 0; k < 64; ++k) sum_sq += at(in[0], r * 64 + k) * at(in[0], r * 64 + k);
        y[static_cast<size_t>(r)] = std::sqrt(sum_sq);
      }
      return y;
    };
    cases.push_back(c);
  }
  {
    OpCase c;
    c.name = "div_";
    c.nmse_bound = 1e-13;
    Tensor denominators = random_tensor({15, 64}, 32, 0.5f);  // in [0.75, 1.75]: no division near zero
    for (int64_t i = 0; i < denominators.numel(); ++i) denominators.data<float>()[i] += 1.25f;
    c.inputs = {{random_tensor({15, 64}, 35, 3.0f), InputKind::Fp32}, {denominators, InputKind::Fp32}};
    c.run = [](Backend& be, std::vector<Tensor>& in) {
      be.div_(in[0], in[1]);
      return in[0];
    };
    c.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> y(15 * 64);
      for (int64_t i = 0; i < 15 * 64; ++i) y[static_cast<size_t>(i)] = at(in[0], i) / at(in[1], i);
      return y;
    };
    cases.push_back(c);
  }
  {
    OpCase c;
    c.name = "scale_rows_";
    c.nmse_bound = 1e-14;
    c.inputs = {{random_tensor({15, 64}, 36, 3.0f), InputKind::Fp32}, {random_tensor({15}, 37, 2.0f), InputKind::Fp32}};
    c.run = [](Backend& be, std::vector<Tensor>& in) {
      be.scale_rows_(in[0], in[1]);
      return in[0];
    };
    c.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> y(15 * 64);
      for (int64_t i = 0; i < 15 * 64; ++i) y[static_cast<size_t>(i)] = at(in[0], i) * at(in[1], i / 64);
      return y;
    };
    cases.push_back(c);
  }
  {
    OpCase c;
    c.name = "axpy_";
    c.nmse_bound = 1e-14;
    c.inputs = {{random_tensor({15, 64}, 33), InputKind::Fp32}, {random_tensor({15, 64}, 34), InputKind::Fp32}};
    c.run = [](Backend& be, std::vector<Tensor>& in) {
      be.axpy_(in[0], -0.0371f, in[1]);
      return in[0];
    };
    c.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> y(15 * 64);
      for (int64_t i = 0; i < 15 * 64; ++i)
        y[static_cast<size_t>(i)] = at(in[0], i) + static_cast<double>(-0.0371f) * at(in[1], i);
      return y;
    };
    cases.push_back(c);
  }
  cases.push_back(permute_case({5, 7, 3}, {2, 0, 1}, InputKind::Fp32, 50));
  cases.push_back(permute_case({37, 19}, {1, 0}, InputKind::Activation, 51));
  cases.push_back(permute_case({3, 2, 2, 5, 2}, {1, 3, 0, 2, 4}, InputKind::Fp32, 52));  // the 2x2 latent packing
  cases.push_back(permute_case({2, 5, 3, 2, 2}, {0, 3, 1, 4, 2}, InputKind::Fp32, 53));  // and its inverse
  cases.push_back(permute_case({2, 3, 1, 4, 2, 3}, {5, 3, 1, 0, 4, 2}, InputKind::Activation, 56));
  {
    // One-byte elements: the image bytes.
    OpCase c;
    c.name = "permute_u8_7x9x3_to_201";
    c.nmse_bound = 0.0;
    c.inputs = {{random_tensor({7, 9, 3}, 57, 140.0f), InputKind::Fp32}};
    c.reference = [](const std::vector<Tensor>& in) {
      Tensor bytes = Tensor::host(in[0].shape());
      for (int64_t i = 0; i < in[0].numel(); ++i)
        bytes.data<float>()[i] = static_cast<float>(std::nearbyint(std::clamp(at(in[0], i) + 120.0, 0.0, 255.0)));
      return permute_f64(bytes, {2, 0, 1});
    };
    c.run = [](Backend& be, std::vector<Tensor>& in) {
      be.scale_shift_(in[0], 1.0f, 120.0f);
      return be.permute(be.to_u8(in[0]), {2, 0, 1});
    };
    cases.push_back(c);
  }
  for (bool divide : {false, true}) {
    // A row vector broadcast over the rows: the VAE's de-normalisation, latents / (1/std) + mean.
    OpCase c;
    c.name = divide ? "div_row_vector" : "add_row_vector";
    c.nmse_bound = 1e-14;
    std::vector<float> v = random_floats(16, 58, 0.2f);
    for (float& d : v) d += 0.5f;  // divisors away from 0
    c.inputs = {{random_tensor({4, 6, 16}, 59, 2.0f), InputKind::Fp32}, {Tensor::host_f32({16}, v), InputKind::Fp32}};
    c.run = [divide](Backend& be, std::vector<Tensor>& in) {
      divide ? be.div_(in[0], in[1]) : be.add_(in[0], in[1]);
      return in[0];
    };
    c.reference = [divide](const std::vector<Tensor>& in) {
      std::vector<double> y;
      for (int64_t i = 0; i < in[0].numel(); ++i)
        y.push_back(divide ? at(in[0], i) / at(in[1], i % 16) : at(in[0], i) + at(in[1], i % 16));
      return y;
    };
    cases.push_back(c);
  }
  {
    // diffusers' postprocess, numpy's float32 arithmetic: clamp(x * 0.5 + 0.5, 0, 1), * 255,
    // round half to even. Inputs reach past [-1, 1] so that both clamps are exercised.
    OpCase c;
    c.name = "postprocess_to_rgb8";
    c.nmse_bound = 0.0;
    c.inputs = {{random_tensor({7, 9, 3}, 54, 1.3f), InputKind::Activation}};
    c.run = [](Backend& be, std::vector<Tensor>& in) { return postprocess_to_u8(be, in[0]); };
    c.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> y;
      for (int64_t i = 0; i < in[0].numel(); ++i) {
        const float v = std::clamp(in[0].data<float>()[i] * 0.5f + 0.5f, 0.0f, 1.0f);
        y.push_back(std::nearbyint(static_cast<double>(v * 255.0f)));
      }
      return y;
    };
    cases.push_back(c);
  }
  {
    // Exact ties, where numpy's round (half to even) and C's round (half away) differ: decoded
    // values x with f32(f32(x * 0.5 + 0.5) * 255) = k + 0.5, found by search; and a NaN (-> 0).
    OpCase c;
    c.name = "postprocess_to_rgb8_ties_and_nan";
    c.nmse_bound = 0.0;
    std::vector<float> xs, expected;
    for (int k = 0; k < 255 && xs.size() < 24; ++k) {
      float v = static_cast<float>((k + 0.5) / 255.0);
      for (int tries = 0; tries < 8 && v * 255.0f != static_cast<float>(k) + 0.5f; ++tries)
        v = std::nextafter(v, v * 255.0f < static_cast<float>(k) + 0.5f ? 2.0f : 0.0f);
      const float x = 2.0f * v - 1.0f;  // exact: v in [0.5/255, 1)
      if (v * 255.0f != static_cast<float>(k) + 0.5f || x * 0.5f + 0.5f != v) continue;
      xs.push_back(x);
      expected.push_back(static_cast<float>(k % 2 == 0 ? k : k + 1));
    }
    xs.push_back(std::numeric_limits<float>::quiet_NaN());
    expected.push_back(0.0f);
    const int64_t n = static_cast<int64_t>(xs.size());
    c.inputs = {{Tensor::host_f32({n}, xs), InputKind::Fp32}};
    c.run = [](Backend& be, std::vector<Tensor>& in) { return postprocess_to_u8(be, in[0]); };
    c.reference = [expected](const std::vector<Tensor>&) { return std::vector<double>(expected.begin(), expected.end()); };
    cases.push_back(c);
  }
  {
    OpCase c;
    c.name = "scale_shift_";
    c.nmse_bound = 1e-14;
    c.inputs = {{random_tensor({15, 64}, 55, 3.0f), InputKind::Fp32}};
    c.run = [](Backend& be, std::vector<Tensor>& in) {
      be.scale_shift_(in[0], 1.7f, -0.3f);
      return in[0];
    };
    c.reference = [](const std::vector<Tensor>& in) {
      std::vector<double> y;
      for (int64_t i = 0; i < in[0].numel(); ++i) y.push_back(at(in[0], i) * static_cast<double>(1.7f) - 0.3);
      return y;
    };
    cases.push_back(c);
  }
  {
    // Both saturations, exact ties (k + 0.5: half to even, where C's round goes away from 0),
    // values near them, and a NaN (-> 0).
    OpCase c;
    c.name = "to_u8";
    c.nmse_bound = 0.0;
    std::vector<float> xs = {-20.0f, -0.5f, -0.0f, 0.49f, 0.5f, 1.5f, 2.5f, 3.5f, 126.5f, 127.5f, 254.5f,
                             254.51f, 255.0f, 255.4f, 255.5f, 300.0f, 1e9f, std::numeric_limits<float>::quiet_NaN()};
    for (int k = 0; k < 40; ++k) xs.push_back(static_cast<float>(k) * 6.53f - 3.0f);
    std::vector<double> expected;
    for (float x : xs)
      expected.push_back(x != x ? 0.0 : std::nearbyint(std::clamp(static_cast<double>(x), 0.0, 255.0)));
    c.inputs = {{Tensor::host_f32({static_cast<int64_t>(xs.size())}, xs), InputKind::Fp32}};
    c.run = [](Backend& be, std::vector<Tensor>& in) { return be.to_u8(in[0]); };
    c.reference = [expected](const std::vector<Tensor>&) { return expected; };
    cases.push_back(c);
  }
  cases.push_back(linear_gelu_case(37, 70, 19, 40));
  cases.push_back(linear_gelu_case(64, 96, 256, 41));
  cases.push_back(linear_rows_case(37, 70, 24, 3, 42));
  cases.push_back(linear_rows_case(8, 16, 64, 0, 43));
  cases.push_back(rms_norm_rope_rows_case(11, 3, 16, 4, 44));
  cases.push_back(rms_norm_rope_rows_case(9, 2, 128, 0, 45));  // the DiT's head dim
  cases.push_back(gated_add_ln_case(false, 33, 48, 46));
  cases.push_back(gated_add_ln_case(true, 33, 48, 46));
  cases.push_back(gated_add_ln_case(false, 5, 3072, 47));  // the DiT's width: 96 columns per lane
  cases.push_back(attention_rows_case(37, 50, 2, 16, 4, 48));
  cases.push_back(attention_rows_case(20, 20, 2, 128, 0, 49));  // the DiT's head dim
  cases.push_back(attention_spare_case(300, 290, 2, 64, 3, 127, 50));   // both pad to 384
  cases.push_back(attention_spare_case(150, 131, 2, 128, 0, 127, 51));  // to 256, the DiT's head dim
  return cases;
}

std::vector<ShapeMistake> all_shape_mistakes() {
  // Inputs on the backend under test, in the dtypes the models use there (never zeros).
  struct On {
    Backend& be;
    Tensor act(const Shape& s, uint32_t seed) { return be.upload(random_tensor(s, seed), be.act_dtype()); }
    Tensor f32(const Shape& s, uint32_t seed) { return be.upload(random_tensor(s, seed), DType::F32); }
    Tensor weight(const Shape& s, uint32_t seed) { return be.upload_weight(random_tensor(s, seed)); }
  };
  std::vector<ShapeMistake> m;
  auto add = [&](std::string name, std::string op, std::string expected, std::function<void(On)> call) {
    m.push_back({std::move(name), std::move(op), std::move(expected), [call](Backend& be) { call(On{be}); }});
  };
  const std::string per_column = "(expected 8 values, one per column)";  // a vector for x [3, 8]
  add("linear_K_differs", "linear", "expected [.., K], [N, K]",
      [](On o) { o.be.linear(o.act({4, 8}, 1), o.weight({6, 9}, 2)); });
  add("linear_bias_length", "linear", "for N = 6", [](On o) {
    Tensor b = o.weight({5}, 3);
    o.be.linear(o.act({4, 8}, 1), o.weight({6, 8}, 2), &b);
  });
  add("linear_no_columns", "linear", "no columns", [](On o) {
    Tensor x = o.be.empty({4, 0}, o.be.act_dtype()), w = o.be.empty({6, 0}, o.be.act_dtype());
    o.be.linear(x, w);
  });
  add("linear_gelu_bias_length", "linear_gelu", "for N = 6",
      [](On o) { o.be.linear_gelu(o.act({4, 8}, 1), o.weight({6, 8}, 2), o.weight({7}, 3)); });
  add("linear_out_shape", "linear", "out f32[3, 6] (expected the result's shape [4, 6])", [](On o) {
    const Tensor b = o.weight({6}, 3);
    o.be.linear(o.act({4, 8}, 1), o.weight({6, 8}, 2), &b, o.f32({6, 6}, 4).slice0(3, 6));
  });
  add("conv_weight_not_9_cin", "conv2d_3x3", "expected [Cout, 9*Cin]",
      [](On o) { o.be.conv2d_3x3(o.act({4, 4, 3}, 1), o.weight({2, 24}, 2), o.weight({2}, 3)); });
  add("conv_stride2_weight_not_9_cin", "conv2d_3x3_stride2", "expected [Cout, 9*Cin]",
      [](On o) { o.be.conv2d_3x3_stride2(o.act({4, 4, 3}, 1), o.weight({2, 24}, 2), o.weight({2}, 3)); });
  add("conv_stride2_one_row", "conv2d_3x3_stride2", "expected H, W >= 2",
      [](On o) { o.be.conv2d_3x3_stride2(o.act({1, 4, 3}, 1), o.weight({2, 27}, 2), o.weight({2}, 3)); });
  add("attention_heads_not_grouped", "attention", "H % Hkv == 0",
      [](On o) { o.be.attention(o.act({5, 3, 8}, 1), o.act({5, 2, 8}, 2), o.act({5, 2, 8}, 3), 0.3f, false); });
  add("attention_causal_lengths", "attention", "causal needs Lq == Lk",
      [](On o) { o.be.attention(o.act({5, 2, 8}, 1), o.act({6, 2, 8}, 2), o.act({6, 2, 8}, 3), 0.3f, true); });
  add("attention_no_keys", "attention", "no keys", [](On o) {
    Tensor kv = o.be.empty({0, 2, 8}, o.be.act_dtype());
    o.be.attention(o.act({5, 2, 8}, 1), kv, kv, 0.3f, false);
  });
  add("attention_out_shape", "attention", "(expected the result's shape [5, 2, 8])", [](On o) {
    const Tensor out = o.act({7, 16}, 4).slice0(3, 7).view({4, 2, 8});
    o.be.attention(o.act({5, 2, 8}, 1), o.act({6, 2, 8}, 2), o.act({6, 2, 8}, 3), 0.3f, false, out);
  });
  add("attention_spare_rows_past_the_buffer", "attention", "q has 0 rows past it", [](On o) {
    const Tensor q = o.act({5, 2, 8}, 1), kv = o.act({6, 2, 8}, 2), out = o.act({6, 2, 8}, 3).slice0(0, 5);
    o.be.attention(q, kv, kv, 0.3f, false, out, 1);  // q's buffer ends with the view
  });
  add("rms_norm_weight_length", "rms_norm", per_column,
      [](On o) { o.be.rms_norm(o.act({3, 8}, 1), o.weight({7}, 2), 1e-6f); });
  add("layer_norm_modulate_scale_length", "layer_norm_modulate", per_column,
      [](On o) { o.be.layer_norm_modulate(o.f32({3, 8}, 1), o.act({8}, 2), o.act({9}, 3), 1e-6f); });
  add("l2_normalize_gamma_length", "l2_normalize", per_column,
      [](On o) { o.be.l2_normalize(o.act({3, 8}, 1), o.weight({4}, 2), 2.0f); });
  add("silu_mul_shapes", "silu_mul", "shapes differ", [](On o) { o.be.silu_mul(o.act({3, 8}, 1), o.act({8, 3}, 2)); });
  add("add_shapes", "add_", "expected y of x's shape, or [8]", [](On o) {
    Tensor x = o.f32({3, 8}, 1);
    o.be.add_(x, o.f32({3, 9}, 2));
  });
  add("gated_add_gate_length", "gated_add_", per_column, [](On o) {
    Tensor x = o.f32({3, 8}, 1);
    o.be.gated_add_(x, o.act({3}, 2), o.act({3, 8}, 3));
  });
  add("rope_table_rows", "rope_interleaved_", "expected [L, Dh/2]", [](On o) {
    Tensor x = o.act({5, 2, 8}, 1);
    o.be.rope_interleaved_(x, o.f32({4, 4}, 2), o.f32({4, 4}, 3));
  });
  add("rope_odd_head_dim", "rope_neox_", "expected [L, Dh/2]", [](On o) {
    Tensor x = o.act({5, 2, 7}, 1);
    o.be.rope_neox_(x, o.f32({5, 3}, 2), o.f32({5, 3}, 3));
  });
  add("rms_norm_rope_heads", "rms_norm_rope", "expected [tokens, H * Dh]", [](On o) {
    o.be.rms_norm_rope(o.act({5, 20}, 2), o.weight({8}, 3), o.f32({5, 4}, 4), o.f32({5, 4}, 5), 1e-6f, o.act({5, 20}, 1));
  });
  add("rms_norm_rope_out_shape", "rms_norm_rope", "(expected the result's shape [5, 16])", [](On o) {
    o.be.rms_norm_rope(o.act({5, 16}, 2), o.weight({8}, 3), o.f32({5, 4}, 4), o.f32({5, 4}, 5), 1e-6f,
                       o.act({6, 16}, 1).slice0(2, 6));
  });
  add("gated_add_layer_norm_modulate_shift_length", "gated_add_layer_norm_modulate_", per_column, [](On o) {
    Tensor x = o.f32({3, 8}, 1);
    o.be.gated_add_layer_norm_modulate_(x, o.act({8}, 2), o.act({3, 8}, 3), o.act({6}, 4), o.act({8}, 5), 1e-6f);
  });
  add("copy_shapes", "copy_", "out f32[2, 8] (expected the result's shape [3, 8])",
      [](On o) { o.be.copy_(o.f32({6, 8}, 1).slice0(4, 6), o.f32({3, 8}, 2)); });
  add("embedding_id_outside_the_table", "", "token id 9 at position 1 is outside the embedding table",
      [](On o) { o.be.embedding(o.weight({9, 4}, 1), ids_tensor({2, 9, 0})); });
  add("upsample_not_an_image", "upsample_nearest2x", "expected [H, W, C]",
      [](On o) { o.be.upsample_nearest2x(o.act({4, 8}, 1)); });
  add("axpy_shapes", "axpy_", "shapes differ", [](On o) {
    Tensor x = o.f32({4, 8}, 1);
    o.be.axpy_(x, -0.1f, o.f32({8, 4}, 2));
  });
  add("div_shapes", "div_", "expected y of x's shape, or [8]", [](On o) {
    Tensor x = o.f32({4, 8}, 1);
    o.be.div_(x, o.f32({4, 7}, 2));
  });
  add("scale_rows_length", "scale_rows_", "one value per row", [](On o) {
    Tensor x = o.f32({4, 8}, 1);
    o.be.scale_rows_(x, o.f32({8}, 2));
  });
  add("permute_repeated_axis", "permute", "expected a permutation of its 3 axes",
      [](On o) { o.be.permute(o.f32({4, 5, 6}, 1), {0, 2, 2}); });
  add("permute_rank_7", "permute", "rank 1 to 6",
      [](On o) { o.be.permute(o.f32({1, 2, 1, 2, 1, 2, 3}, 1), {0, 1, 2, 3, 4, 5, 6}); });
  add("add_row_vector_length", "add_", "expected y of x's shape, or [8]",
      [](On o) { Tensor x = o.f32({3, 8}, 1); o.be.add_(x, o.f32({7}, 2)); });
  add("div_row_vector_length", "div_", "expected y of x's shape, or [8]",
      [](On o) { Tensor x = o.f32({3, 8}, 1); o.be.div_(x, o.f32({3}, 2)); });
  return m;
}

std::vector<NonfiniteCase> nonfinite_cases() {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto planted = [](std::string name, int64_t n, uint32_t seed, std::vector<std::pair<int64_t, float>> bad) {
    Tensor t = random_tensor({n}, seed, 1e3f);
    t.data<float>()[n / 3] = 1e38f;  // huge but finite (in bf16 too)
    for (auto [at, v] : bad) t.data<float>()[at] = v;
    return NonfiniteCase{std::move(name), t, static_cast<int64_t>(bad.size())};
  };
  const int64_t big = (int64_t{1} << 20) + 7;  // many blocks, grid-stride, a ragged tail
  return {planted("none", 1000, 60, {}),
          planted("one_nan", 1, 61, {{0, nan}}),
          planted("every_kind", 777, 62, {{0, nan}, {5, -nan}, {100, inf}, {776, -inf}}),
          planted("spread_over_blocks", big, 63, {{0, inf}, {4095, nan}, {big / 2, -inf}, {big - 1, nan}, {big - 2, nan}})};
}

std::string shape_mistake_failure(Backend& be, const ShapeMistake& mistake) {
  try {
    mistake.call(be);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (!mistake.op.empty() && what.rfind(mistake.op + ":", 0) != 0 &&
        what.find(" " + mistake.op + ":") == std::string::npos)
      return fmt::format("the error does not name {}: {}", mistake.op, what);
    if (what.find(mistake.expected) == std::string::npos)
      return fmt::format("the error does not say '{}': {}", mistake.expected, what);
    return "";
  }
  return fmt::format("{} accepted the call", be.name());
}

}  // namespace ditbatch::selftest
