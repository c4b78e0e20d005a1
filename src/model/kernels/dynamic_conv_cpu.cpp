// JetBlock's token-dependent causal depthwise convolution + SiLU, without the [B, T, C, W]
// window tensor the reference builds (unfold + multiply + sum):
//   a[t, c] = sum_w k[t, c, w] x[t - W + 1 + w, c];   y = SiLU(a)
//   backward: s = dy SiLU'(a);  dk[t, c, w] = s[t, c] x[t - W + 1 + w, c];
//             dx[t, c] = sum_w s[t + W - 1 - w, c] k[t + W - 1 - w, c, w]
// Saved for backward: x and k (the generator output, kept by its Linear anyway); a is recomputed.
#include <ATen/Parallel.h>

#include <vector>

#include "model/kernels/cpu_kernels.h"
#include "model/kernels/vec_ops.h"

namespace hlp::model::kernels {

namespace {

constexpr int64_t kRowGrain = 8;

// a[c] for one (b, t) row; x_b points at x[b, 0, 0]. kW > 0: the width known at compile time
// (4, Jet-Nemotron's), so that the compiler vectorises the stride-W kernel reads over c.
template <int64_t kW, typename T>
inline void pre_activation(T* a, const T* x_b, const T* k_row, int64_t t, int64_t C,
                           int64_t W_runtime) {
  const int64_t W = kW > 0 ? kW : W_runtime;
  for (int64_t c = 0; c < C; ++c) a[c] = T(0);
  for (int64_t w = 0; w < W; ++w) {
    const int64_t src = t - W + 1 + w;
    if (src < 0) continue;
    const T* xs = x_b + src * C;
    for (int64_t c = 0; c < C; ++c) a[c] += k_row[c * W + w] * xs[c];
  }
}

// dk[c, w] = s[c] x[t - W + 1 + w, c] for one row
template <int64_t kW, typename T>
inline void kernel_grad_row(T* dk_row, const T* s_row, const T* x_b, int64_t t, int64_t C,
                            int64_t W_runtime) {
  const int64_t W = kW > 0 ? kW : W_runtime;
  for (int64_t w = 0; w < W; ++w) {
    const int64_t src = t - W + 1 + w;
    if (src < 0) {
      for (int64_t c = 0; c < C; ++c) dk_row[c * W + w] = T(0);
      continue;
    }
    const T* xs = x_b + src * C;
    for (int64_t c = 0; c < C; ++c) dk_row[c * W + w] = s_row[c] * xs[c];
  }
}

// dx[t, c] = sum_w s[t + W - 1 - w, c] k[t + W - 1 - w, c, w]; s_b, k_b at row (b, 0)
template <int64_t kW, typename T>
inline void input_grad_row(T* dx_row, const T* s_b, const T* k_b, int64_t t, int64_t T_,
                           int64_t C, int64_t W_runtime) {
  const int64_t W = kW > 0 ? kW : W_runtime;
  for (int64_t c = 0; c < C; ++c) dx_row[c] = T(0);
  for (int64_t w = 0; w < W; ++w) {
    const int64_t dst = t + W - 1 - w;
    if (dst >= T_) continue;
    const T* sr = s_b + dst * C;
    const T* kr = k_b + dst * C * W;
    for (int64_t c = 0; c < C; ++c) dx_row[c] += sr[c] * kr[c * W + w];
  }
}

}  // namespace

at::Tensor dynamic_conv_forward(const at::Tensor& x_in, const at::Tensor& k_in, int64_t W) {
  const auto x = x_in.contiguous(), k = k_in.contiguous();
  const int64_t B = x.size(0), T_ = x.size(1), C = x.size(2);
  TORCH_CHECK(k.numel() == B * T_ * C * W, "dynamic_conv: kernels must be [B, T, C * width]");
  auto y = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "dynamic_conv_forward", [&] {
    using T = scalar_t;
    constexpr int64_t Wd = Vec<T>::size();
    const T* xp = x.data_ptr<T>();
    const T* kp = k.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    at::parallel_for(0, B * T_, kRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / T_, t = row % T_;
        T* yr = yp + row * C;
        if (W == 4) pre_activation<4>(yr, xp + b * T_ * C, kp + row * C * W, t, C, W);
        else pre_activation<0>(yr, xp + b * T_ * C, kp + row * C * W, t, C, W);
        for (int64_t c = 0; c < C; c += Wd) {
          const int64_t n = std::min<int64_t>(Wd, C - c);
          const auto a = Vec<T>::loadu(yr + c, n);
          (a * sigmoid(a)).store(yr + c, n);
        }
      }
    });
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> dynamic_conv_backward(const at::Tensor& dy_in,
                                                         const at::Tensor& x_in,
                                                         const at::Tensor& k_in, int64_t W) {
  const auto dy = dy_in.contiguous(), x = x_in.contiguous(), k = k_in.contiguous();
  const int64_t B = x.size(0), T_ = x.size(1), C = x.size(2);
  auto s = at::empty_like(x);  // dy * SiLU'(a), a temporary of the backward only
  auto dx = at::empty_like(x);
  auto dk = at::empty_like(k);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "dynamic_conv_backward", [&] {
    using T = scalar_t;
    constexpr int64_t Wd = Vec<T>::size();
    const T* dyp = dy.data_ptr<T>();
    const T* xp = x.data_ptr<T>();
    const T* kp = k.data_ptr<T>();
    T* sp = s.data_ptr<T>();
    T* dxp = dx.data_ptr<T>();
    T* dkp = dk.data_ptr<T>();
    const Vec<T> one(T(1));
    // pass 1: s and dk, row by row
    at::parallel_for(0, B * T_, kRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / T_, t = row % T_;
        const T* x_b = xp + b * T_ * C;
        T* sr = sp + row * C;
        if (W == 4) pre_activation<4>(sr, x_b, kp + row * C * W, t, C, W);
        else pre_activation<0>(sr, x_b, kp + row * C * W, t, C, W);
        for (int64_t c = 0; c < C; c += Wd) {
          const int64_t n = std::min<int64_t>(Wd, C - c);
          const auto a = Vec<T>::loadu(sr + c, n);
          const auto sg = sigmoid(a);
          (Vec<T>::loadu(dyp + row * C + c, n) * sg * (one + a * (one - sg))).store(sr + c, n);
        }
        if (W == 4) kernel_grad_row<4>(dkp + row * C * W, sr, x_b, t, C, W);
        else kernel_grad_row<0>(dkp + row * C * W, sr, x_b, t, C, W);
      }
    });
    // pass 2: dx[t] gathers from the W output rows t .. t + W - 1 that read x[t]
    at::parallel_for(0, B * T_, kRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / T_, t = row % T_;
        const T* s_b = sp + b * T_ * C;
        const T* k_b = kp + b * T_ * C * W;
        if (W == 4) input_grad_row<4>(dxp + row * C, s_b, k_b, t, T_, C, W);
        else input_grad_row<0>(dxp + row * C, s_b, k_b, t, T_, C, W);
      }
    });
  });
  return {dx, dk};
}

}  // namespace hlp::model::kernels
