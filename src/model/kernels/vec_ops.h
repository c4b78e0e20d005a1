#pragma once
// Row helpers of the fused kernels on raw pointers, vectorised with at::vec::Vectorized (AVX2
// when the kernels library is built for it, see src/model/CMakeLists.txt). Every helper takes
// a length n and handles the tail with partial loads / stores. Internal to src/model/kernels/.
#include <ATen/cpu/vec/vec.h>

#include <cmath>
#include <cstdint>

namespace hlp::model::kernels {

template <typename T>
using Vec = at::vec::Vectorized<T>;

// sum_i a[i] * b[i]
template <typename T>
inline T dot(const T* a, const T* b, int64_t n) {
  constexpr int64_t W = Vec<T>::size();
  Vec<T> acc(T(0));
  int64_t i = 0;
  for (; i + W <= n; i += W) acc = at::vec::fmadd(Vec<T>::loadu(a + i), Vec<T>::loadu(b + i), acc);
  T tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  T lanes[W];
  acc.store(lanes);
  for (int64_t l = 0; l < W; ++l) tail += lanes[l];
  return tail;
}

// y[i] += alpha * x[i]
template <typename T>
inline void axpy(T* y, T alpha, const T* x, int64_t n) {
  constexpr int64_t W = Vec<T>::size();
  const Vec<T> a(alpha);
  int64_t i = 0;
  for (; i + W <= n; i += W)
    at::vec::fmadd(a, Vec<T>::loadu(x + i), Vec<T>::loadu(y + i)).store(y + i);
  for (; i < n; ++i) y[i] += alpha * x[i];
}

// y[i] = alpha * x[i]
template <typename T>
inline void scale_to(T* y, T alpha, const T* x, int64_t n) {
  constexpr int64_t W = Vec<T>::size();
  const Vec<T> a(alpha);
  int64_t i = 0;
  for (; i + W <= n; i += W) (a * Vec<T>::loadu(x + i)).store(y + i);
  for (; i < n; ++i) y[i] = alpha * x[i];
}

// out[j] = exp(c - x[j]) for j < n (the decay row exp(gamma_i - gamma_j))
template <typename T>
inline void exp_of_difference(T* out, T c, const T* x, int64_t n) {
  constexpr int64_t W = Vec<T>::size();
  const Vec<T> cv(c);
  int64_t i = 0;
  for (; i + W <= n; i += W) (cv - Vec<T>::loadu(x + i)).exp().store(out + i);
  if (i < n) (cv - Vec<T>::loadu(x + i, n - i)).exp().store(out + i, n - i);
}

// sigmoid and SiLU on one vector register and on a scalar (the same formula both ways)
template <typename T>
inline Vec<T> sigmoid(const Vec<T>& x) {
  const Vec<T> one(T(1));
  return one / (one + x.neg().exp());
}
template <typename T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

}  // namespace hlp::model::kernels
