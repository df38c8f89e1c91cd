// The Adam update on the CPU (the CUDA kernel: kernels/cuda/adam.h), with the options of
// kernels/adam.h.
#pragma once

#include <cstdint>

#include "kernels/adam.h"

namespace tnmt::kernels::cpu {

using ::tnmt::kernels::AdamOptions;

// Adam with bias correction: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps). grad_scale multiplies g first.
void AdamUpdate(float* w, float* m, float* v, const float* g, int64_t count, float grad_scale,
                const AdamOptions& o);

}  // namespace tnmt::kernels::cpu
