#pragma once
// Row-major matrix product on raw pointers for the per-chunk products of the delta-rule kernel:
//   C[M, N] = alpha * op(A) op(B) + beta * C,  op(A) [M, K] is A ([M, K], row stride lda) or,
//   with trans_a, A^T of an A stored [K, M]; likewise op(B) [K, N].
// Calls the BLAS that LibTorch uses (Fortran sgemm_ / dgemm_, no dispatcher in between) when
// the build found one (HLP_HAVE_FORTRAN_BLAS), else at::mm on the same buffers.
#include <cstdint>

namespace hlp::model::kernels {

void gemm_rm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
             const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
             int64_t ldc);
void gemm_rm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
             const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
             int64_t ldc);

}  // namespace hlp::model::kernels
