// GPU training kernels mirroring kernels/cpu loss.h, dropout.h and adam.h: the label-smoothed
// cross-entropy (forward and its gradient in one pass over the logits), dropout from the same
// counter-based RNG (bit-identical masks, so a run may move between CPU and GPU), and the Adam
// update. Device pointers, outputs first, queued on the Context's stream.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/adam.h"
#include "kernels/cuda/context.h"

namespace tnmt::kernels::cuda {

// As cpu::LabelSmoothedCrossEntropy: logits: [rows, vocab] become d(summed loss)/d(logits) in
// place; pad rows get zero gradient. sums: device double[3] written with {summed smoothed
// loss, summed target NLL, number of non-pad targets}. Row sums are added in a fixed order,
// so the result is deterministic. Uses a rows * 2 doubles scratch from ctx's allocator.
absl::Status LabelSmoothedCrossEntropy(Context& ctx, float* logits, const int32_t* targets,
                                       int64_t rows, int vocab, float eps, int32_t pad,
                                       double* sums);

// As cpu::RDropConsistency: logits [2 * pairs, vocab] (row r paired with row r + pairs) become
// the gradient of R-Drop's consistency term in place; the term summed over the pairs is added
// to *loss_sum (device double). Pair sums are added in a fixed order. Uses a pairs doubles
// scratch from ctx's allocator.
absl::Status RDropConsistency(Context& ctx, float* logits, const int32_t* targets, int64_t pairs,
                              int vocab, float alpha, int32_t pad, double* loss_sum);

// As cpu::Dropout: x[i] = keep ? x[i] / (1 - p) : 0 with keep iff
// CounterUniform(seed, stream_id, i) >= p (the same bits as on the CPU). p == 0: no-op.
absl::Status Dropout(Context& ctx, float* x, int64_t count, float p, uint64_t seed,
                     uint64_t stream_id);

// As cpu::AdamUpdate (bias-corrected Adam; g multiplied by grad_scale first), in the CPU's
// expression order with each operation rounded on its own (no fused multiply-adds); the CPU's
// x86-64-v3/v4 builds may fuse some, so the two can differ in the last bit or two.
using ::tnmt::kernels::AdamOptions;  // kernels/adam.h
absl::Status AdamUpdate(Context& ctx, float* w, float* m, float* v, const float* g, int64_t count,
                        float grad_scale, const AdamOptions& options);

// acc: [count] += x: [count] (doubles, device memory), queued on the Context's stream: the training
// engine adds each micro-batch's loss sums into the update's totals.
absl::Status AddDoubles(Context& ctx, double* acc, const double* x, int count);

// *dst = value (device memory), queued on the Context's stream (no host buffer to keep alive): the
// rank's stop and save requests, reduced with the totals.
absl::Status StoreDouble(Context& ctx, double* dst, double value);

}  // namespace tnmt::kernels::cuda
