// Elementwise and row-wise CUDA kernels mirroring kernels/cpu/elementwise.h (same names and
// semantics, float32, device pointers, an explicit stream). Each returns a Status that names the failing launch.
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

}  // namespace tnmt::kernels::cuda
