// Small kernels of the CUDA decoder step; see step_ops.h. One block per row for the row-wise
// ones; grid-stride loops elsewhere. Every index that can pass 2^31 is int64.
#include "kernels/cuda/step_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"

namespace tnmt::kernels::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void ReorderSlotTablesKernel(int32_t* dst, const int32_t* src, int64_t stride,
                                        const int32_t* map, const int32_t* positions,
                                        const int32_t* slots) {
  const int64_t r = blockIdx.x;
  const int32_t from = map[r];
  const int32_t len = positions[r];
  int32_t* d = dst + r * stride;
  if (from >= 0) {
    const int32_t* s = src + static_cast<int64_t>(from) * stride;
    for (int32_t j = threadIdx.x; j < len; j += blockDim.x) d[j] = s[j];
  }
  if (threadIdx.x == 0) d[len] = slots[r];
}

__global__ void ScatterRowsKernel(float* dst, int64_t dst_stride, const int32_t* dst_rows,
                                  const float* src, int64_t src_stride, const int32_t* src_rows,
                                  int width) {
  const int64_t i = blockIdx.x;
  const int64_t from = src_rows != nullptr ? src_rows[i] : i;
  const float* s = src + from * src_stride;
  float* d = dst + static_cast<int64_t>(dst_rows[i]) * dst_stride;
  for (int c = blockIdx.y * blockDim.x + threadIdx.x; c < width; c += gridDim.y * blockDim.x) {
    d[c] = s[c];
  }
}

// Block-wide reduction (sum or max) of one float per thread; every thread gets the result.
template <bool kMax>
__device__ float BlockReduce(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_down_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x >> 5) ? shared[lane] : (kMax ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
      const float other = __shfl_down_sync(0xffffffffu, v, o);
      v = kMax ? fmaxf(v, other) : v + other;
    }
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const float result = shared[0];
  __syncthreads();
  return result;
}

__global__ void LogSumExpAndPickKernel(float* lse, float* picked, const float* x, int n,
                                       int32_t pick) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const float* row = x + r * n;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = BlockReduce<true>(mx, shared);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) sum += expf(row[j] - mx);
  sum = BlockReduce<false>(sum, shared);
  if (threadIdx.x == 0) {
    lse[r] = mx + logf(sum);
    picked[r] = row[pick];
  }
}

template <typename V>
__global__ void GatherKernel(char* dst, int64_t dst_stride, const char* src, int64_t src_stride,
                             const int32_t* index, int64_t units) {
  const int64_t r = blockIdx.x;
  const V* s = reinterpret_cast<const V*>(src + static_cast<int64_t>(index[r]) * src_stride);
  V* d = reinterpret_cast<V*>(dst + r * dst_stride);
  for (int64_t u = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    d[u] = s[u];
  }
}

}  // namespace

absl::Status ReorderSlotTables(Context& ctx, int32_t* dst, const int32_t* src, int64_t stride,
                               const int32_t* map, const int32_t* positions, const int32_t* slots,
                               int rows) {
  cudaStream_t stream = ctx.stream();
  if (rows < 0 || stride < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReorderSlotTables: rows ", rows, ", stride ", stride));
  }
  if (rows == 0) return absl::OkStatus();
  ReorderSlotTablesKernel<<<static_cast<unsigned>(rows), 128, 0, stream>>>(dst, src, stride, map,
                                                                           positions, slots);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status ScatterRows(Context& ctx, float* dst, int64_t dst_stride, const int32_t* dst_rows,
                         const float* src, int64_t src_stride, const int32_t* src_rows,
                         int64_t count, int width) {
  cudaStream_t stream = ctx.stream();
  if (count < 0 || width < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ScatterRows: count ", count, ", width ", width));
  }
  if (count == 0 || width == 0) return absl::OkStatus();
  if (count > 0x7fffffff) return absl::InvalidArgumentError("ScatterRows: too many rows");
  const dim3 grid(static_cast<unsigned>(count),
                  static_cast<unsigned>(std::min((width + kThreads - 1) / kThreads, 64)));
  ScatterRowsKernel<<<grid, kThreads, 0, stream>>>(dst, dst_stride, dst_rows, src, src_stride,
                                                   src_rows, width);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status LogSumExpAndPick(Context& ctx, float* lse, float* picked, const float* x, int64_t rows,
                              int n, int32_t pick) {
  cudaStream_t stream = ctx.stream();
  if (rows < 0 || n < 1 || pick < 0 || pick >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("LogSumExpAndPick: rows ", rows, ", n ", n, ", pick ", pick));
  }
  if (rows == 0) return absl::OkStatus();
  if (rows > 0x7fffffff) return absl::InvalidArgumentError("LogSumExpAndPick: too many rows");
  LogSumExpAndPickKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(lse, picked, x, n,
                                                                               pick);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status GatherRows(Context& ctx, void* dst, int64_t dst_stride, const void* src,
                        int64_t src_stride, const int32_t* index, int64_t rows, int64_t row_bytes) {
  cudaStream_t stream = ctx.stream();
  if (rows < 0 || row_bytes < 0) return absl::InvalidArgumentError("cuda::GatherRows: negative size");
  if (rows == 0 || row_bytes == 0) return absl::OkStatus();
  if (rows > 0x7fffffff) return absl::InvalidArgumentError("cuda::GatherRows: too many rows");
  auto aligned = [&](int64_t a) {
    return reinterpret_cast<uintptr_t>(dst) % a == 0 && reinterpret_cast<uintptr_t>(src) % a == 0 &&
           dst_stride % a == 0 && src_stride % a == 0 && row_bytes % a == 0;
  };
  const int64_t unit = aligned(16) ? 16 : aligned(4) ? 4 : 1;
  const int64_t units = row_bytes / unit;
  const dim3 grid(static_cast<unsigned>(rows),
                  static_cast<unsigned>(std::min<int64_t>((units + kThreads - 1) / kThreads, 64)));
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  if (unit == 16) {
    GatherKernel<uint4><<<grid, kThreads, 0, stream>>>(d, dst_stride, s, src_stride, index, units);
  } else if (unit == 4) {
    GatherKernel<uint32_t><<<grid, kThreads, 0, stream>>>(d, dst_stride, s, src_stride, index, units);
  } else {
    GatherKernel<char><<<grid, kThreads, 0, stream>>>(d, dst_stride, s, src_stride, index, units);
  }
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace tnmt::kernels::cuda
