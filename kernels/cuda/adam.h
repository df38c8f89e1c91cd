// The Adam update on the GPU, with the options of kernels/adam.h and the semantics of
// kernels/cpu/adam.h. Device pointers, outputs first, queued on the Context's stream.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/adam.h"
#include "kernels/cuda/context.h"

namespace tnmt::kernels::cuda {

// As cpu::AdamUpdate (bias-corrected Adam; g multiplied by grad_scale first), in the CPU's
// expression order with each operation rounded on its own (no fused multiply-adds); the CPU's
// x86-64-v3/v4 builds may fuse some, so the two can differ in the last bit or two.
using ::tnmt::kernels::AdamOptions;  // kernels/adam.h
absl::Status AdamUpdate(Context& ctx, float* w, float* m, float* v, const float* g, int64_t count,
                        float grad_scale, const AdamOptions& options);

}  // namespace tnmt::kernels::cuda
