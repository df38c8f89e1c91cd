// OpenBLAS-backed GEMM wrappers; see gemm.h.
#include "kernels/cpu/gemm.h"

#include <cblas.h>

namespace tnmt::kernels::cpu {

void GemmNT(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc);
}

void GemmNN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc);
}

void GemmTN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc);
}

void SetBlasThreads(int threads) { openblas_set_num_threads(threads < 1 ? 1 : threads); }

int BlasThreads() { return openblas_get_num_threads(); }

}  // namespace tnmt::kernels::cpu
