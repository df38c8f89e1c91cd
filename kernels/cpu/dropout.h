// Dropout on the CPU from the counter hash (kernels/counter_uniform.h, shared with the CUDA
// kernels): masks are recomputed, never stored; the same (seed, stream, index) always gives the
// same bit, which makes resume and multi-process runs exact. Raw pointers, outputs first. The
// fused activation-and-dropout kernels are in elementwise.h.
#pragma once

#include <cstdint>

#include "kernels/counter_uniform.h"

namespace tnmt::kernels::cpu {

using ::tnmt::kernels::CounterUniform;

// In place: x[i] = keep ? x[i] / (1 - p) : 0, keep iff CounterUniform(seed, stream, i) >= p
// (kernels/counter_uniform.h, the same bits as on the GPU).
// Used identically for the forward and (on the gradient) the backward. p == 0: no-op.
void Dropout(float* x, int64_t count, float p, uint64_t seed, uint64_t stream);

// y = Dropout of x (the same mask for the same seed and stream), x left as it is; y may be x.
// p == 0: a copy.
void DropoutFrom(float* y, const float* x, int64_t count, float p, uint64_t seed, uint64_t stream);

// y = Dropout of y, plus x: a residual connection after a dropped sub-layer output, in one pass
// (each element the value Dropout and then y += x give). p == 0: y += x.
void DropoutAdd(float* y, const float* x, int64_t count, float p, uint64_t seed, uint64_t stream);

// Dropout of a block of a larger tensor: x[i] is that tensor's element first_index + i, so the
// mask is the one Dropout(tensor, ...) applies there. Runs on the calling thread.
void DropoutBlock(float* x, int64_t count, uint64_t first_index, float p, uint64_t seed,
                  uint64_t stream);

}  // namespace tnmt::kernels::cpu
