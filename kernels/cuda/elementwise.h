// Elementwise and row-wise CUDA kernels mirroring kernels/cpu/elementwise.h (same names and
// semantics, float32, device pointers, an explicit stream), forward (elementwise.cu) and
// backward (elementwise_backward.cu). Each returns a Status that names the failing launch.
// Parameter gradients (dgamma, dbeta, db) are accumulated (+=); activation gradients (dx) are
// written (=), as on the CPU. The backward's reductions are split into fixed chunks added in a
// fixed order (no floating-point atomics): bit-identical from run to run; the chunking depends
// on the shapes only, never on the device. Scratch comes from ctx.allocator() and is handed back
// in stream order before the function returns.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/activation.h"
#include "kernels/cuda/context.h"

namespace tnmt::kernels::cuda {

// y: [rows, n] = act(y + bias) in place; kRelu or kGelu (tanh approximation, the CPU's
// formula); other activations are an InvalidArgument error.
absl::Status BiasActivation(Context& ctx, float* y, const float* bias, int64_t rows, int n,
                            Activation act);

// out: [count] = x + r, as kernels/cpu Add (out may alias x or r: x += r is Add(out = x, x, r)).
absl::Status Add(Context& ctx, float* out, const float* x, const float* r, int64_t count);

// out: [rows, d] = LayerNorm(x + r) * gamma + beta; r may be null; out may alias x.
absl::Status LayerNorm(Context& ctx, float* out, const float* x, const float* r, const float* gamma,
                       const float* beta, int64_t rows, int d, float eps);

// In-place row softmax of x: [rows, n]; an all -inf row becomes zeros.
absl::Status Softmax(Context& ctx, float* x, int64_t rows, int n);

// x: [count] *= s.
absl::Status ScaleInPlace(Context& ctx, float* x, int64_t count, float s);

// dx: [rows, d] = d LayerNorm(x) / dx · dy (mean and variance recomputed from x: [rows, d]);
// dgamma, dbeta: [d] += their gradients. dx may alias dy. Scratch: 2 * rows floats plus
// 2 * d doubles per 64 rows.
absl::Status LayerNormBackward(Context& ctx, float* dx, float* dgamma, float* dbeta,
                               const float* dy, const float* x, const float* gamma, int64_t rows,
                               int d, float eps);

// dx = dy * act'(pre): [count], act kRelu or kGelu (tanh approximation), with the CPU's
// derivative; other activations are an InvalidArgument error. dx may alias dy.
absl::Status ActivationBackward(Context& ctx, float* dx, const float* dy, const float* pre,
                                int64_t count, Activation act);

// db: [n] += column sums of dy: [rows, n]. Scratch: n doubles per 64 rows.
absl::Status AccumulateColumnSum(Context& ctx, float* db, const float* dy, int64_t rows, int n);

}  // namespace tnmt::kernels::cuda
