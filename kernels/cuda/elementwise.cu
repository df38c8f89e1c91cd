// CUDA elementwise and row-wise kernels, forward; see elementwise.h (the backward:
// elementwise_backward.cu). Add and ScaleInPlace are grid-stride loops; the row kernels run one
// block per row, with block-wide reductions in shared memory; two-pass mean/variance as on the
// CPU.
#include "kernels/cuda/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_common.cuh"

namespace tnmt::kernels::cuda {

namespace {

constexpr int kThreads = 256;

__device__ float BlockSum(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < (blockDim.x >> 5) ? shared[threadIdx.x] : 0.0f;
  if (warp == 0) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const float total = shared[0];
  __syncthreads();
  return total;
}

__device__ float BlockMax(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < (blockDim.x >> 5) ? shared[threadIdx.x] : -INFINITY;
  if (warp == 0) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const float total = shared[0];
  __syncthreads();
  return total;
}

__global__ void BiasActivationKernel(float* y, const float* bias, int64_t total, int n, bool gelu) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = y[i] + (bias != nullptr ? bias[i % n] : 0.0f);
    if (gelu) {
      v = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    } else {
      v = v > 0.0f ? v : 0.0f;
    }
    y[i] = v;
  }
}

// Grid-stride; out may alias x or r (each element is read before it is written).
__global__ void AddKernel(float* out, const float* x, const float* r, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = x[i] + r[i];
  }
}

__global__ void LayerNormKernel(float* out, const float* x, const float* r, const float* gamma,
                                const float* beta, int d, float eps) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * d;
  const float* rr = r != nullptr ? r + row * d : nullptr;
  float* o = out + row * d;
  float sum = 0.0f;
  for (int j = threadIdx.x; j < d; j += blockDim.x) sum += xr[j] + (rr ? rr[j] : 0.0f);
  const float mean = BlockSum(sum, shared) / d;
  float sq = 0.0f;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    const float c = xr[j] + (rr ? rr[j] : 0.0f) - mean;
    sq += c * c;
  }
  const float inv = rsqrtf(BlockSum(sq, shared) / d + eps);
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = xr[j] + (rr ? rr[j] : 0.0f);
    o[j] = (v - mean) * inv * gamma[j] + beta[j];
  }
}

__global__ void SoftmaxKernel(float* x, int n) {
  __shared__ float shared[32];
  float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = BlockMax(mx, shared);
  if (mx == -INFINITY) {
    for (int j = threadIdx.x; j < n; j += blockDim.x) row[j] = 0.0f;
    return;
  }
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) sum += __expf(row[j] - mx);
  const float inv = 1.0f / BlockSum(sum, shared);
  for (int j = threadIdx.x; j < n; j += blockDim.x) row[j] = __expf(row[j] - mx) * inv;
}

__global__ void ScaleInPlaceKernel(float* x, int64_t count, float s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] *= s;
  }
}

}  // namespace

absl::Status BiasActivation(Context& ctx, float* y, const float* bias, int64_t rows, int n,
                            Activation act) {
  cudaStream_t stream = ctx.stream();
  if (!HasCudaKernel(act)) {
    return absl::InvalidArgumentError(
        absl::StrCat("BiasActivation: no CUDA kernel for ", ActivationName(act)));
  }
  const bool gelu = act == Activation::kGelu;
  const int64_t total = rows * n;
  if (total == 0) return absl::OkStatus();
  const int blocks = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65535));
  BiasActivationKernel<<<blocks, kThreads, 0, stream>>>(y, bias, total, n, gelu);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status Add(Context& ctx, float* out, const float* x, const float* r, int64_t count) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("cuda::Add: count ", count, " < 0"));
  if (count == 0) return absl::OkStatus();
  const unsigned blocks = static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((count + kThreads - 1) / kThreads, 132 * 16)));
  AddKernel<<<blocks, kThreads, 0, ctx.stream()>>>(out, x, r, count);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status LayerNorm(Context& ctx, float* out, const float* x, const float* r, const float* gamma,
                       const float* beta, int64_t rows, int d, float eps) {
  cudaStream_t stream = ctx.stream();
  if (rows == 0) return absl::OkStatus();
  LayerNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(out, x, r, gamma, beta, d, eps);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status Softmax(Context& ctx, float* x, int64_t rows, int n) {
  cudaStream_t stream = ctx.stream();
  if (rows == 0) return absl::OkStatus();
  SoftmaxKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, n);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status ScaleInPlace(Context& ctx, float* x, int64_t count, float s) {
  TNMT_KERNEL_RETURN_IF_ERROR(internal::CheckCount("ScaleInPlace", count));
  if (count == 0) return absl::OkStatus();
  ScaleInPlaceKernel<<<internal::GridFor(count, kThreads), kThreads, 0, ctx.stream()>>>(x, count, s);
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace tnmt::kernels::cuda
