// Small device helpers of the CUDA train engine that kernels/cuda does not have: adding
// per-micro-batch loss sums into the update's totals and storing one host value into device
// memory in stream order (the rank's stop request, reduced with the totals).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace tnmt::train::cuda {

// acc: [count] += x: [count] (doubles, device memory), queued on `stream`.
absl::Status AddDoubles(double* acc, const double* x, int count, cudaStream_t stream);

// *dst = value (device memory), queued on `stream` (no host buffer to keep alive).
absl::Status StoreDouble(double* dst, double value, cudaStream_t stream);

}  // namespace tnmt::train::cuda
