// Single-precision GEMM on the CPU through OpenBLAS (the only BLAS tnmt uses; loaded at run
// time, see gemm.cc).
// Row-major throughout. Thread count is process-wide and set once by the runtime
// (SetBlasThreads); kernels never change it.
#pragma once

#include <string>

namespace tnmt::kernels::cpu {

// c: [m, n] = alpha * a: [m, k] · b^T + beta * c, with b stored [n, k] (torch Linear layout).
// lda/ldb/ldc are row strides in elements.
void GemmNT(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc);

// c: [m, n] = alpha * a: [m, k] · b: [k, n] + beta * c.
void GemmNN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc);

// c: [m, n] = alpha * a^T · b + beta * c, with a stored [k, m] and b stored [k, n].
void GemmTN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc);

// Sets the BLAS thread pool size and the compute threads (parallel.h) for the whole process
// (call once, before any GEMM): the one place that decides threads.
void SetBlasThreads(int threads);
int BlasThreads();
// The kernel family OpenBLAS runs (e.g. "SkylakeX"); see gemm.cc for how it is chosen.
std::string BlasCoreName();

}  // namespace tnmt::kernels::cpu
