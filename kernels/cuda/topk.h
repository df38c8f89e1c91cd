// Top-k over rows of logits on the GPU (the beam's candidate tokens per hypothesis), the
// operation of kernels/cpu/topk.h. Device pointers, outputs first, queued on the Context's
// stream; returns a Status that names the failing launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"

namespace tnmt::kernels::cuda {

// The k largest entries of each row of x: [rows, n], best first; ties go to the lower index
// (the order of the engine's CPU beam search). values, ids: [rows, k]. Token `exclude` (e.g.
// the pad id; -1 for none) is never chosen. NaN ranks below every number. 1 <= k <= 256 and
// k <= the number of eligible tokens. Radix select (4 passes of 8 bits over the row), then the
// k winners are ranked in shared memory; one block per row.
constexpr int kMaxTopK = 256;
absl::Status TopK(Context& ctx, float* values, int32_t* ids, const float* x, int64_t rows, int n,
                  int k, int32_t exclude);

}  // namespace tnmt::kernels::cuda
