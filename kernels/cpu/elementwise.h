// Fused elementwise and row-wise CPU kernels of the Transformer, forward (elementwise.cc) and
// backward (elementwise_backward.cc). Raw pointers, outputs first, row-major; shapes in the
// comments. In-place use (out == x) is allowed wherever a comment says so. Parameter gradients
// are accumulated (+=); activation gradients are written (=) unless the name says Accumulate.
#pragma once

#include <cstdint>

#include "kernels/activation.h"

namespace tnmt::kernels::cpu {

using ::tnmt::kernels::Activation;
using ::tnmt::kernels::ActivationName;

// y: [rows, n] = act(y + bias[n]); in place. bias may be null.
void BiasActivation(float* y, const float* bias, int64_t rows, int n, Activation act);

// x ([rows, cols]) = Dropout of act(x), in place: each element what BiasActivation (no bias) and
// then Dropout (dropout.h) give, a block of rows at a time over the compute threads (one pass
// from memory).
void ActivationDropout(float* x, int64_t rows, int cols, Activation act, float p, uint64_t seed, uint64_t stream);

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

// dx: [rows, d] = d LayerNorm(x) / dx · dy, recomputing mean and 1/std from x exactly as the
// forward LayerNorm computed them.
// dgamma, dbeta: [d] += their gradients. dx may alias dy.
void LayerNormBackward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                       const float* gamma, int64_t rows, int d, float eps);

// dx = dy * act'(pre) where pre is the activation's input: [count]. dx may alias dy.
void ActivationBackward(float* dx, const float* dy, const float* pre, int64_t count, Activation act);

// db: [n] += column sums of dy: [rows, n].
void AccumulateColumnSum(float* db, const float* dy, int64_t rows, int n);

// dx = the gradient through Dropout and then act, in place: each element what Dropout(dx) and
// then ActivationBackward(dx, dx, pre) give, a block at a time (one pass from memory).
void DropoutActivationBackward(float* dx, const float* pre, int64_t count, Activation act, float p, uint64_t seed,
                               uint64_t stream);

}  // namespace tnmt::kernels::cpu
