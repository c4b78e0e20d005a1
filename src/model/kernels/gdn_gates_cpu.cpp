// The Gated DeltaNet gate path in one pass each way (docs/model-math.md, "Gated DeltaNet"):
//   q, k:  y = scale n / sqrt(sum n^2 + 1e-6) per head, n = SiLU(x) (JetBlock) or x;
//          backward dn = scale (r dy - n r^3 (n . dy)), dx = dn SiLU'(x)
//   beta = sigmoid(b);  g = -exp(A_log) softplus(a + dt_bias)
//          backward db = dbeta beta (1 - beta); da = dg (-exp(A_log)) sigmoid(a + dt_bias)
//          (1 above torch's softplus threshold 20), ddt_bias = sum da, dA_log = sum dg g
#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

#include "model/kernels/cpu_kernels.h"
#include "model/kernels/vec_ops.h"

namespace hlp::model::kernels {

namespace {

constexpr int64_t kRowGrain = 16;
constexpr double kL2Eps = 1e-6;
constexpr double kSoftplusThreshold = 20.0;

// n = SiLU(x) or x, into out
template <typename T>
inline void activation(T* out, const T* x, int64_t d, bool apply_silu) {
  constexpr int64_t W = Vec<T>::size();
  for (int64_t j = 0; j < d; j += W) {
    const int64_t n = std::min<int64_t>(W, d - j);
    const auto v = Vec<T>::loadu(x + j, n);
    (apply_silu ? v * sigmoid(v) : v).store(out + j, n);
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> l2_normalize_forward(const at::Tensor& x_in, int64_t d,
                                                        double scale, bool apply_silu) {
  const auto x = x_in.contiguous();
  const int64_t heads = x.numel() / d;  // rows * heads
  auto y = at::empty_like(x);
  auto inv_norm = at::empty({heads}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "l2_normalize_forward", [&] {
    using T = scalar_t;
    const T* xp = x.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    T* rp = inv_norm.data_ptr<T>();
    at::parallel_for(0, heads, kRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        T* yr = yp + i * d;
        activation(yr, xp + i * d, d, apply_silu);
        const T r = T(1) / std::sqrt(dot(yr, yr, d) + T(kL2Eps));
        rp[i] = r;
        scale_to(yr, T(scale) * r, yr, d);
      }
    });
  });
  return {y, inv_norm.view({x.numel() / x.size(-1), x.size(-1) / d})};
}

at::Tensor l2_normalize_backward(const at::Tensor& dy_in, const at::Tensor& x_in,
                                 const at::Tensor& inv_norm_in, int64_t d, double scale,
                                 bool apply_silu) {
  const auto dy = dy_in.contiguous(), x = x_in.contiguous(), inv_norm = inv_norm_in.contiguous();
  const int64_t heads = x.numel() / d;
  auto dx = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "l2_normalize_backward", [&] {
    using T = scalar_t;
    constexpr int64_t W = Vec<T>::size();
    const T* dyp = dy.data_ptr<T>();
    const T* xp = x.data_ptr<T>();
    const T* rp = inv_norm.data_ptr<T>();
    T* dxp = dx.data_ptr<T>();
    const Vec<T> one(T(1));
    at::parallel_for(0, heads, kRowGrain, [&](int64_t begin, int64_t end) {
      std::vector<T> n_buf(static_cast<size_t>(d));
      T* nv = n_buf.data();
      for (int64_t i = begin; i < end; ++i) {
        const T* xr = xp + i * d;
        const T* dyr = dyp + i * d;
        T* dxr = dxp + i * d;
        activation(nv, xr, d, apply_silu);
        const T r = rp[i];
        const T c = r * r * r * dot(nv, dyr, d);
        // dn = scale (r dy - c n)
        scale_to(dxr, T(scale) * r, dyr, d);
        axpy(dxr, -T(scale) * c, nv, d);
        if (!apply_silu) continue;
        for (int64_t j = 0; j < d; j += W) {
          const int64_t n = std::min<int64_t>(W, d - j);
          const auto xv = Vec<T>::loadu(xr + j, n);
          const auto s = sigmoid(xv);
          (Vec<T>::loadu(dxr + j, n) * s * (one + xv * (one - s))).store(dxr + j, n);
        }
      }
    });
  });
  return dx;
}

std::tuple<at::Tensor, at::Tensor> gdn_gates_forward(const at::Tensor& a_in, const at::Tensor& b_in,
                                                     const at::Tensor& A_log_in,
                                                     const at::Tensor& dt_bias_in) {
  const auto a = a_in.contiguous(), b = b_in.contiguous();
  const auto A_log = A_log_in.contiguous(), dt_bias = dt_bias_in.contiguous();
  const int64_t H = A_log.numel(), R = a.numel() / H;
  auto beta = at::empty_like(b), g = at::empty_like(a);
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "gdn_gates_forward", [&] {
    using T = scalar_t;
    const T* ap = a.data_ptr<T>();
    const T* bp = b.data_ptr<T>();
    const T* Alp = A_log.data_ptr<T>();
    const T* dtp = dt_bias.data_ptr<T>();
    T* betap = beta.data_ptr<T>();
    T* gp = g.data_ptr<T>();
    at::parallel_for(0, R, 256, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t i = r * H + h;
          betap[i] = sigmoid(bp[i]);
          const T z = ap[i] + dtp[h];
          const T softplus = z > T(kSoftplusThreshold) ? z : std::log1p(std::exp(z));
          gp[i] = -std::exp(Alp[h]) * softplus;
        }
    });
  });
  return {beta, g};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> gdn_gates_backward(
    const at::Tensor& dbeta_in, const at::Tensor& dg_in, const at::Tensor& a_in,
    const at::Tensor& b_in, const at::Tensor& A_log_in, const at::Tensor& dt_bias_in) {
  const auto a = a_in.contiguous(), b = b_in.contiguous();
  const auto A_log = A_log_in.contiguous(), dt_bias = dt_bias_in.contiguous();
  const auto dbeta = dbeta_in.defined() ? dbeta_in.contiguous() : at::zeros_like(b);
  const auto dg = dg_in.defined() ? dg_in.contiguous() : at::zeros_like(a);
  const int64_t H = A_log.numel(), R = a.numel() / H;
  auto da = at::empty_like(a), db = at::empty_like(b);
  // per-head sums in double, serial over rows (R * H is small: B * T * heads)
  std::vector<double> dA_log_sum(static_cast<size_t>(H), 0.0), ddt_sum(static_cast<size_t>(H), 0.0);
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "gdn_gates_backward", [&] {
    using T = scalar_t;
    const T* ap = a.data_ptr<T>();
    const T* bp = b.data_ptr<T>();
    const T* Alp = A_log.data_ptr<T>();
    const T* dtp = dt_bias.data_ptr<T>();
    const T* dbetap = dbeta.data_ptr<T>();
    const T* dgp = dg.data_ptr<T>();
    T* dap = da.data_ptr<T>();
    T* dbp = db.data_ptr<T>();
    for (int64_t r = 0; r < R; ++r)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t i = r * H + h;
        const T beta = sigmoid(bp[i]);
        dbp[i] = dbetap[i] * beta * (T(1) - beta);
        const T z = ap[i] + dtp[h];
        const bool linear = z > T(kSoftplusThreshold);
        const T softplus = linear ? z : std::log1p(std::exp(z));
        const T A = std::exp(Alp[h]);
        const T d_softplus = dgp[i] * -A;
        dap[i] = linear ? d_softplus : d_softplus * sigmoid(z);
        ddt_sum[static_cast<size_t>(h)] += static_cast<double>(dap[i]);
        dA_log_sum[static_cast<size_t>(h)] += static_cast<double>(dgp[i] * -A * softplus);
      }
  });
  auto dA_log = at::empty_like(A_log), ddt_bias = at::empty_like(dt_bias);
  for (int64_t h = 0; h < H; ++h) {
    dA_log[h] = dA_log_sum[static_cast<size_t>(h)];
    ddt_bias[h] = ddt_sum[static_cast<size_t>(h)];
  }
  return {da, db, dA_log, ddt_bias};
}

}  // namespace hlp::model::kernels
