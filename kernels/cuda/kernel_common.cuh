// Helpers shared by this library's .cu files (nvcc only; never included by host code or
// exported): grid sizing, argument checks, scratch from the Context's allocator, and the
// block-wide reductions of the training kernels. The reductions add in a fixed order (a
// butterfly within each warp, then the warps' partials in warp order), so a result depends on
// the block size and the data only: bit-identical from run to run.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/context.h"

// Returns a failed absl::Status from the enclosing function.
#define TNMT_KERNEL_RETURN_IF_ERROR(expr)      \
  do {                                         \
    if (absl::Status s_ = (expr); !s_.ok()) {  \
      return s_;                               \
    }                                          \
  } while (false)

namespace tnmt::kernels::cuda::internal {

// Blocks of `threads` for a grid-stride loop over count elements: at least 1, at most 16 per
// SM of the largest card (132 SMs).
inline unsigned GridFor(int64_t count, int threads) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((count + threads - 1) / threads, 132 * 16)));
}

// InvalidArgument naming cuda::<fn> when count < 0.
inline absl::Status CheckCount(const char* fn, int64_t count) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("cuda::", fn, ": count ", count, " < 0"));
  return absl::OkStatus();
}

// At least one byte, so a zero-sized scratch is still a valid (unused) pointer.
inline absl::StatusOr<DeviceBuffer> Scratch(Context& ctx, size_t bytes) {
  return ctx.allocator().Buffer(std::max<size_t>(bytes, 1));
}

// Block reductions (blockDim.x a multiple of 32, at most 1024). Every thread gets the total;
// the trailing __syncthreads makes `shared` reusable by the next call.

template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline double BlockSum(double v, double* shared /* [32] */) {
  v = WarpSum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x >> 5) ? shared[lane] : 0.0;
    v = WarpSum(v);
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const double total = shared[0];
  __syncthreads();
  return total;
}

__device__ inline float BlockMax(float v, float* shared /* [32] */) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x >> 5) ? shared[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const float total = shared[0];
  __syncthreads();
  return total;
}

}  // namespace tnmt::kernels::cuda::internal
