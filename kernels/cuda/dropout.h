// Dropout on the GPU from the counter hash shared with the CPU (kernels/counter_uniform.h):
// the masks are bit-identical to kernels/cpu/dropout.h's, so a run may move between CPU and
// GPU. Device pointers, outputs first, queued on the Context's stream.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"

namespace tnmt::kernels::cuda {

// As cpu::Dropout: x[i] = keep ? x[i] / (1 - p) : 0 with keep iff
// CounterUniform(seed, stream_id, i) >= p (the same bits as on the CPU). p == 0: no-op.
absl::Status Dropout(Context& ctx, float* x, int64_t count, float p, uint64_t seed,
                     uint64_t stream_id);

}  // namespace tnmt::kernels::cuda
