// Fused elementwise and row-wise CPU kernels of the Transformer forward pass.
// Raw pointers, outputs first, row-major; shapes in the comments. In-place use (out == x) is
// allowed wherever a comment says so.
#pragma once

#include <cstdint>

#include "kernels/activation.h"

namespace tnmt::kernels::cpu {

using ::tnmt::kernels::Activation;
using ::tnmt::kernels::ActivationName;


// y: [rows, n] = act(y + bias[n]); in place. bias may be null.
void BiasActivation(float* y, const float* bias, int64_t rows, int n, Activation act);

// y: [rows, n] += bias[n]; in place. bias may be null (then a no-op).
void AddBias(float* y, const float* bias, int64_t rows, int n);

// out: [rows, n] = x + r (out may alias x or r).
void Add(float* out, const float* x, const float* r, int64_t count);

// out[i] = x[i] for i < count (no overlap), split over the compute threads (a whole batch's
// activations: both cores' bandwidth).
void Copy(float* out, const float* x, int64_t count);

// out: [rows, d] = LayerNorm(x + r) * gamma + beta, r may be null. out may alias x.
// Variance is the biased one; eps inside the square root.
void LayerNorm(float* out, const float* x, const float* r, const float* gamma, const float* beta,
               int64_t rows, int d, float eps);

// mean_rstd: [rows, 2] = each row's mean and 1 / sqrt(variance + eps), bit for bit those
// LayerNorm (r null) normalizes that row with on this CPU's kernel path.
void LayerNormStats(float* mean_rstd, const float* x, int64_t rows, int d, float eps);

// In place row softmax of x: [rows, n].
void Softmax(float* x, int64_t rows, int n);

// lse: [rows] = log(sum(exp(x[r, :]))) for x: [rows, n].
void LogSumExp(float* lse, const float* x, int64_t rows, int n);

// Converts stored half-precision bit patterns to float32.
void HalfToFloat(float* out, const uint16_t* in, int64_t count);
void BFloat16ToFloat(float* out, const uint16_t* in, int64_t count);

}  // namespace tnmt::kernels::cpu
