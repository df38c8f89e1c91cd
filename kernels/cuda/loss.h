// The training losses on the GPU, with the semantics of kernels/cpu/loss.h: the label-smoothed
// cross-entropy (forward and its gradient in one pass over the logits) and R-Drop's consistency
// term. The CPU functions return their sums; these add them into device memory, so the step
// never waits for the host. Device pointers, outputs first, queued on the Context's stream.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
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

}  // namespace tnmt::kernels::cuda
