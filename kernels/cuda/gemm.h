// GEMMs through cuBLASLt, row-major like kernels/cpu/gemm.h, queued on a Context's stream.
// Storage in float32, float16 or bfloat16; accumulation always in float32 (float32 inputs may
// opt into TF32 tensor cores). The matmul descriptor, layouts and the heuristic's algorithm are
// cached per shape in the Context, so repeated shapes (every decode step) skip the heuristic.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"
#include "kernels/dtype.h"

namespace tnmt::kernels::cuda {

// Operand types: kernels/dtype.h (float32, float16, bfloat16 here).
using ::tnmt::kernels::DType;
using ::tnmt::kernels::DTypeBytes;
const char* DTypeName(DType t);

enum class Epilogue {
  kNone,
  kBias,      // c += bias[n] (one value per output column, the Linear bias)
  kBiasRelu,  // c = relu(c + bias)
  kBiasGelu,  // c = gelu(c + bias), tanh approximation (as kernels/cpu BiasActivation)
};

struct GemmOptions {
  DType ab_type = DType::kFloat32;  // a and b
  DType c_type = DType::kFloat32;   // c (and bias); float32 output with half inputs is allowed
  Epilogue epilogue = Epilogue::kNone;
  const void* bias = nullptr;  // [n] of c_type, device memory; required by the bias epilogues
  bool tf32 = false;           // float32 only: TF32 tensor cores (~1e-3 relative error)
};

// Row-major c: [m, n] = alpha * op(a) · op(b) + beta * c, then the epilogue.
// op(a) = a: [m, k] (row stride lda) or, with trans_a, a^T for a stored [k, m];
// op(b) = b: [k, n] (row stride ldb) or, with trans_b, b^T for b stored [n, k].
// Errors name the failing cuBLASLt call and the shape.
absl::Status Gemm(Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                  const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c,
                  int64_t ldc, const GemmOptions& options = {});

// The three layouts of kernels/cpu/gemm.h, float32 (and their half-precision twins through
// Gemm with options):
// GemmNT: c = alpha * a · b^T + beta * c, b stored [n, k] (the engine's Linear layout).
inline absl::Status GemmNT(Context& ctx, int m, int n, int k, float alpha, const float* a,
                           int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                           int64_t ldc) {
  return Gemm(ctx, false, true, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
// GemmNN: c = alpha * a · b + beta * c (backward: dX = dY · W).
inline absl::Status GemmNN(Context& ctx, int m, int n, int k, float alpha, const float* a,
                           int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                           int64_t ldc) {
  return Gemm(ctx, false, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
// GemmTN: c = alpha * a^T · b + beta * c, a stored [k, m] (backward: dW = dY^T · X).
inline absl::Status GemmTN(Context& ctx, int m, int n, int k, float alpha, const float* a,
                           int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                           int64_t ldc) {
  return Gemm(ctx, true, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Number of distinct GEMM plans cached in ctx (for tests and logs).
int64_t CachedGemmPlans(Context& ctx);

}  // namespace tnmt::kernels::cuda
