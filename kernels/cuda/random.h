// Device-side random fill for tests and benchmarks (never time or test on zeros): uniform
// values in [lo, hi) from a counter-based hash of (seed, index), stored as float32, float16 or
// bfloat16. Deterministic for a given seed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/gemm.h"  // DType

namespace tnmt::kernels::cuda {

absl::Status FillUniform(Context& ctx, void* x, DType type, int64_t count, float lo, float hi,
                         uint64_t seed);

}  // namespace tnmt::kernels::cuda
