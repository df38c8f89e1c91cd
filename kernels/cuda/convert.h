// Element type conversion between the storage types of kernels/cuda (float32, float16,
// bfloat16) on the device, e.g. float32 master weights to float16/bfloat16 GEMM copies and
// half-precision gradients back to float32.
//
// Invariants: narrowing rounds to nearest even (overflow gives inf, tiny values become
// subnormals or signed zero as IEEE says); widening is exact; a NaN that changes type becomes
// the destination's canonical quiet NaN, sign dropped (float32 0x7fc00000, float16 0x7e00,
// bfloat16 0x7fc0, as PyTorch); the same type on both sides is a plain copy (bits kept).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/gemm.h"  // DType

namespace tnmt::kernels::cuda {
// dst[i] = src[i] converted (round to nearest even) between float32, float16, bfloat16 (any pair,
// same type = copy). count elements. Device pointers. dst and src must not overlap unless they are
// the same pointer and the same type (a no-op). Queued on the Context's stream; count == 0 does
// nothing; a negative count is InvalidArgument.
absl::Status Convert(Context& ctx, void* dst, DType dst_type, const void* src, DType src_type,
                     int64_t count);
}  // namespace tnmt::kernels::cuda
