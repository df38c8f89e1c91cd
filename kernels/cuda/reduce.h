// Sums the CUDA training step keeps in device memory, so the host reads them once per update
// rather than once per micro-batch: the gradient's sum of squares (its norm, for clipping and the
// loss-scaling overflow check), the loss totals over micro-batches, and the rank's stop and save
// flags stored beside them. The CPU trainer computes these with host loops (its FlatOptimizer
// kernels, trainer/model/cpu_train_engine.cc): there is no CPU kernel. Device pointers, outputs
// first, queued on the Context's stream; results are bit-identical from run to run.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"

namespace tnmt::kernels::cuda {

// out: device double[1] = sum of x[i]^2 over x: [count], accumulated in double in a fixed
// order (deterministic). NaN or inf in x gives a non-finite result (the trainer's overflow
// check for loss scaling). count == 0 writes 0.
absl::Status SumOfSquares(Context& ctx, double* out, const float* x, int64_t count);

// acc: [count] += x: [count] (doubles, device memory): the training engine adds each
// micro-batch's loss sums into the update's totals.
absl::Status AddDoubles(Context& ctx, double* acc, const double* x, int count);

// *dst = value (device memory; no host buffer to keep alive): the rank's stop and save
// requests, reduced with the totals.
absl::Status StoreDouble(Context& ctx, double* dst, double value);

}  // namespace tnmt::kernels::cuda
