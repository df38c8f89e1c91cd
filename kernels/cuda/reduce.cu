// Sums in device memory for the training step; see reduce.h. SumOfSquares is a two-kernel
// reduction with a block count fixed by the size (never the device), added in a fixed order.
#include "kernels/cuda/reduce.h"

#include <algorithm>
#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_common.cuh"

namespace tnmt::kernels::cuda {

namespace {

using internal::BlockSum;
using internal::CheckCount;
using internal::Scratch;

constexpr int kThreads = 256;
constexpr int kSumBlocks = 1024;  // partial sums of SumOfSquares (fixed: deterministic)

// partial[blockIdx.x] = sum of x^2 over this block's grid-stride elements, in double.
__global__ void __launch_bounds__(kThreads)
    SumOfSquaresPartialKernel(double* partial, const float* x, int64_t count) {
  __shared__ double shared[32];
  double s = 0.0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double v = x[i];
    s += v * v;
  }
  s = BlockSum(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// out[0] = sum of partial[0, n), fixed order. One block.
__global__ void __launch_bounds__(kThreads)
    SumPartialsKernel(double* out, const double* partial, int n) {
  __shared__ double shared[32];
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
  s = BlockSum(s, shared);
  if (threadIdx.x == 0) out[0] = s;
}

__global__ void AddDoublesKernel(double* acc, const double* x, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) acc[i] += x[i];
}

__global__ void StoreDoubleKernel(double* dst, double value) { *dst = value; }

}  // namespace

absl::Status SumOfSquares(Context& ctx, double* out, const float* x, int64_t count) {
  TNMT_KERNEL_RETURN_IF_ERROR(CheckCount("SumOfSquares", count));
  // The block count depends on count only, so the summation order is fixed per size.
  const int blocks =
      static_cast<int>(std::min<int64_t>((count + kThreads - 1) / kThreads, kSumBlocks));
  absl::StatusOr<DeviceBuffer> partial = Scratch(ctx, sizeof(double) * blocks);
  if (!partial.ok()) return partial.status();
  if (blocks > 0) {
    SumOfSquaresPartialKernel<<<blocks, kThreads, 0, ctx.stream()>>>(partial->as<double>(), x,
                                                                     count);
    TNMT_KERNEL_RETURN_IF_ERROR(TNMT_CUDA_LAUNCH_CHECK());
  }
  SumPartialsKernel<<<1, kThreads, 0, ctx.stream()>>>(out, partial->as<double>(), blocks);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status AddDoubles(Context& ctx, double* acc, const double* x, int count) {
  cudaStream_t stream = ctx.stream();
  if (count <= 0) return absl::OkStatus();
  constexpr int kBlock = 128;
  AddDoublesKernel<<<(count + kBlock - 1) / kBlock, kBlock, 0, stream>>>(acc, x, count);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status StoreDouble(Context& ctx, double* dst, double value) {
  cudaStream_t stream = ctx.stream();
  StoreDoubleKernel<<<1, 1, 0, stream>>>(dst, value);
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace tnmt::kernels::cuda
