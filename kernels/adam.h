// The Adam update's options, one struct for the CPU (kernels/cpu/adam.h AdamUpdate), the
// CUDA kernel (kernels/cuda/adam.h AdamUpdate) and the trainer's optimizers.
// Both devices compute, with bias correction and g first multiplied by grad_scale:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
#pragma once

#include <cstdint>

namespace tnmt::kernels {

struct AdamOptions {
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.98f;
  float eps = 1e-9f;
  int64_t step = 1;  // 1-based, for bias correction
};

}  // namespace tnmt::kernels
