#include "model/kernels/small_gemm.h"

#include <ATen/ATen.h>

#ifdef HLP_HAVE_FORTRAN_BLAS
extern "C" {
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
            const float* beta, float* c, const int* ldc);
void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const double* alpha, const double* a, const int* lda, const double* b,
            const int* ldb, const double* beta, double* c, const int* ldc);
}
#endif

namespace hlp::model::kernels {

namespace {

#ifdef HLP_HAVE_FORTRAN_BLAS
// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
template <typename T, typename Fn>
void fortran_gemm(Fn fn, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                  int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const char opb = tb ? 'T' : 'N', opa = ta ? 'T' : 'N';
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int ldb_ = static_cast<int>(ldb), lda_ = static_cast<int>(lda), ldc_ = static_cast<int>(ldc);
  fn(&opb, &opa, &m, &n, &k, &alpha, B, &ldb_, A, &lda_, &beta, C, &ldc_);
}
#else
template <typename T>
void aten_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
               int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const auto opts = at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value);
  auto view = [&](const T* p, int64_t rows, int64_t cols, int64_t ld) {
    return at::from_blob(const_cast<T*>(p), {rows, cols}, {ld, 1}, opts);
  };
  auto a = ta ? view(A, K, M, lda).t() : view(A, M, K, lda);
  auto b = tb ? view(B, N, K, ldb).t() : view(B, K, N, ldb);
  auto c = view(C, M, N, ldc);
  if (beta == T(0)) c.zero_();
  c.addmm_(a, b, beta == T(0) ? T(1) : beta, alpha);
}
#endif

}  // namespace

void gemm_rm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
             int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
#ifdef HLP_HAVE_FORTRAN_BLAS
  fortran_gemm<float>(sgemm_, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
  aten_gemm<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

void gemm_rm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
             int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
#ifdef HLP_HAVE_FORTRAN_BLAS
  fortran_gemm<double>(dgemm_, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
  aten_gemm<double>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

}  // namespace hlp::model::kernels
