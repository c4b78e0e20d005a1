// RMSNorm (+ weight, + optional SiLU gate) forward and backward, one row at a time.
//   forward:  r = 1 / sqrt(sum x^2 / D + eps);  y = x r w [* SiLU(z)]
//   backward: with e = dy [* SiLU(z)] w:  dx = r e - x r^3 (e . x) / D
//             dw = sum_rows dy [* SiLU(z)] x r;   dz = dy (x r w) SiLU'(z)
// Saved for backward: x, w, z and r (one scalar a row); nothing of size [R, D] is new.
#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

#include "model/kernels/cpu_kernels.h"
#include "model/kernels/vec_ops.h"

namespace hlp::model::kernels {

namespace {

constexpr int64_t kRowGrain = 16;

// SiLU'(z) = s (1 + z (1 - s)), s = sigmoid(z)
template <typename T>
inline Vec<T> silu_grad(const Vec<T>& z, const Vec<T>& s) {
  const Vec<T> one(T(1));
  return s * (one + z * (one - s));
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x_in, const at::Tensor& w_in,
                                                    const at::Tensor& gate_in, double eps) {
  const auto x = x_in.contiguous(), w = w_in.contiguous();
  const auto gate = gate_in.defined() ? gate_in.contiguous() : gate_in;
  const int64_t D = x.size(-1), R = x.numel() / D;
  auto y = at::empty_like(x);
  auto inv_rms = at::empty({R}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "rms_norm_forward", [&] {
    using T = scalar_t;
    constexpr int64_t Wd = Vec<T>::size();
    const T* xp = x.data_ptr<T>();
    const T* wp = w.data_ptr<T>();
    const T* zp = gate.defined() ? gate.data_ptr<T>() : nullptr;
    T* yp = y.data_ptr<T>();
    T* rp = inv_rms.data_ptr<T>();
    at::parallel_for(0, R, kRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const T* xr = xp + row * D;
        T* yr = yp + row * D;
        const T r = T(1) / std::sqrt(dot(xr, xr, D) / T(D) + T(eps));
        rp[row] = r;
        const Vec<T> rv(r);
        int64_t j = 0;
        for (; j < D; j += Wd) {
          const int64_t n = std::min<int64_t>(Wd, D - j);
          auto out = Vec<T>::loadu(xr + j, n) * rv * Vec<T>::loadu(wp + j, n);
          if (zp) {
            const auto z = Vec<T>::loadu(zp + row * D + j, n);
            out = out * z * sigmoid(z);
          }
          out.store(yr + j, n);
        }
      }
    });
  });
  return {y, inv_rms};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rms_norm_backward(
    const at::Tensor& dy_in, const at::Tensor& x_in, const at::Tensor& w_in,
    const at::Tensor& gate_in, const at::Tensor& inv_rms, bool need_weight_grad) {
  const auto dy = dy_in.contiguous(), x = x_in.contiguous(), w = w_in.contiguous();
  const auto gate = gate_in.defined() ? gate_in.contiguous() : gate_in;
  const int64_t D = x.size(-1), R = x.numel() / D;
  auto dx = at::empty_like(x);
  auto dgate = gate.defined() ? at::empty_like(gate) : at::Tensor();
  // one partial weight gradient per thread, summed at the end
  const int64_t threads = at::get_num_threads();
  auto dw_partial = need_weight_grad ? at::zeros({threads, D}, x.options()) : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "rms_norm_backward", [&] {
    using T = scalar_t;
    constexpr int64_t Wd = Vec<T>::size();
    const T* dyp = dy.data_ptr<T>();
    const T* xp = x.data_ptr<T>();
    const T* wp = w.data_ptr<T>();
    const T* zp = gate.defined() ? gate.data_ptr<T>() : nullptr;
    const T* rp = inv_rms.data_ptr<T>();
    T* dxp = dx.data_ptr<T>();
    T* dzp = gate.defined() ? dgate.data_ptr<T>() : nullptr;
    T* dwp = need_weight_grad ? dw_partial.data_ptr<T>() : nullptr;
    at::parallel_for(0, R, kRowGrain, [&](int64_t begin, int64_t end) {
      std::vector<T> e(static_cast<size_t>(D));  // dy [* SiLU(z)] w of this row
      T* dw_mine = dwp ? dwp + at::get_thread_num() * D : nullptr;
      for (int64_t row = begin; row < end; ++row) {
        const T* xr = xp + row * D;
        const T* dyr = dyp + row * D;
        const T r = rp[row];
        const Vec<T> rv(r);
        for (int64_t j = 0; j < D; j += Wd) {
          const int64_t n = std::min<int64_t>(Wd, D - j);
          auto g = Vec<T>::loadu(dyr + j, n);  // dy [* SiLU(z)]
          if (zp) {
            const auto z = Vec<T>::loadu(zp + row * D + j, n);
            const auto s = sigmoid(z);
            const auto wx = Vec<T>::loadu(xr + j, n) * rv * Vec<T>::loadu(wp + j, n);
            (g * wx * silu_grad(z, s)).store(dzp + row * D + j, n);
            g = g * z * s;
          }
          if (dw_mine) {
            const auto acc = Vec<T>::loadu(dw_mine + j, n) + g * Vec<T>::loadu(xr + j, n) * rv;
            acc.store(dw_mine + j, n);
          }
          (g * Vec<T>::loadu(wp + j, n)).store(e.data() + j, n);
        }
        const T c = r * r * r * dot(e.data(), xr, D) / T(D);
        T* dxr = dxp + row * D;
        scale_to(dxr, r, e.data(), D);
        axpy(dxr, -c, xr, D);
      }
    });
  });
  auto dw = need_weight_grad ? dw_partial.sum(0) : at::Tensor();
  return {dx, dw, dgate};
}

}  // namespace hlp::model::kernels
