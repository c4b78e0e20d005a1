// SwiGLU's element-wise part, h = SiLU(g) * u, in one pass each way.
//   backward: dg = dh u s (1 + g (1 - s)),  du = dh g s,  s = sigmoid(g)
// Saved for backward: g and u only (the reference also keeps SiLU(g) and sigmoid(g)).
#include <ATen/Parallel.h>

#include "model/kernels/cpu_kernels.h"
#include "model/kernels/vec_ops.h"

namespace hlp::model::kernels {

namespace {
constexpr int64_t kElementGrain = 4096;
}

at::Tensor swiglu_forward(const at::Tensor& gate_in, const at::Tensor& up_in) {
  TORCH_CHECK(gate_in.sizes() == up_in.sizes(), "swiglu: gate and up shapes differ");
  const auto gate = gate_in.contiguous(), up = up_in.contiguous();
  auto h = at::empty_like(gate);
  AT_DISPATCH_FLOATING_TYPES(gate.scalar_type(), "swiglu_forward", [&] {
    using T = scalar_t;
    constexpr int64_t W = Vec<T>::size();
    const T* gp = gate.data_ptr<T>();
    const T* up_p = up.data_ptr<T>();
    T* hp = h.data_ptr<T>();
    at::parallel_for(0, gate.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; i += W) {
        const int64_t n = std::min<int64_t>(W, end - i);
        const auto g = Vec<T>::loadu(gp + i, n);
        (g * sigmoid(g) * Vec<T>::loadu(up_p + i, n)).store(hp + i, n);
      }
    });
  });
  return h;
}

std::tuple<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dh_in, const at::Tensor& gate_in,
                                                   const at::Tensor& up_in) {
  const auto dh = dh_in.contiguous(), gate = gate_in.contiguous(), up = up_in.contiguous();
  auto dgate = at::empty_like(gate), dup = at::empty_like(up);
  AT_DISPATCH_FLOATING_TYPES(gate.scalar_type(), "swiglu_backward", [&] {
    using T = scalar_t;
    constexpr int64_t W = Vec<T>::size();
    const T* dhp = dh.data_ptr<T>();
    const T* gp = gate.data_ptr<T>();
    const T* up_p = up.data_ptr<T>();
    T* dgp = dgate.data_ptr<T>();
    T* dup_p = dup.data_ptr<T>();
    const Vec<T> one(T(1));
    at::parallel_for(0, gate.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; i += W) {
        const int64_t n = std::min<int64_t>(W, end - i);
        const auto d = Vec<T>::loadu(dhp + i, n);
        const auto g = Vec<T>::loadu(gp + i, n);
        const auto s = sigmoid(g);
        (d * g * s).store(dup_p + i, n);
        (d * Vec<T>::loadu(up_p + i, n) * s * (one + g * (one - s))).store(dgp + i, n);
      }
    });
  });
  return {dgate, dup};
}

}  // namespace hlp::model::kernels
