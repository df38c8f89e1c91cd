// Backward kernels of kernels/cuda/elementwise.h (layer norm, activation, bias column sums),
// mirroring kernels/cpu/elementwise_backward.cc. One block per row for layer norm; column sums
// as fixed-order two-kernel reductions (partials per chunk of rows, then the chunks added in
// order) instead of atomics, so results are bit-identical from run to run.
#include <climits>
#include <cmath>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/kernel_common.cuh"

namespace tnmt::kernels::cuda {

namespace {

using internal::BlockSum;
using internal::CheckCount;
using internal::GridFor;
using internal::Scratch;

constexpr int kThreads = 256;   // row, column and elementwise kernels
constexpr int kRowChunk = 64;   // rows per partial sum of the column reductions

// ---------------------------------------------------------------------------------------------
// Column sums: partial[chunk, output, j] over rows [chunk * kRowChunk, +kRowChunk), then the
// chunks added in order.

// stats: [rows, 2] = {mean, rstd} of each row of x: [rows, d], computed as the CPU does.
__global__ void __launch_bounds__(kThreads)
    LayerNormStatsKernel(float* stats, const float* x, int d, float eps) {
  __shared__ double shared[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * d;
  double sum = 0.0;
  for (int j = threadIdx.x; j < d; j += blockDim.x) sum += xr[j];
  sum = BlockSum(sum, shared);
  const float mean = static_cast<float>(sum / d);
  double sq = 0.0;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    const float c = xr[j] - mean;
    sq += static_cast<double>(c * c);
  }
  sq = BlockSum(sq, shared);
  const float rstd = 1.0f / sqrtf(static_cast<float>(sq / d) + eps);
  if (threadIdx.x == 0) {
    stats[2 * r] = mean;
    stats[2 * r + 1] = rstd;
  }
}

// Layer norm (stats != null): partial[chunk, 0, j] = sum dy * xhat, partial[chunk, 1, j] = sum
// dy. Otherwise partial[chunk, 0, j] = sum dy. Grid: (chunks, ceil(d / blockDim.x)).
__global__ void __launch_bounds__(kThreads)
    ColumnPartialsKernel(double* partial, const float* dy, const float* x, const float* stats,
                         int64_t rows, int d) {
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= d) return;
  const int64_t chunk = blockIdx.x;
  const int64_t r0 = chunk * kRowChunk;
  const int64_t r1 = rows < r0 + kRowChunk ? rows : r0 + kRowChunk;
  double s_dy = 0.0, s_dyx = 0.0;
  for (int64_t r = r0; r < r1; ++r) {
    const float g = dy[r * d + j];
    s_dy += g;
    if (stats != nullptr) {
      const float xhat = (x[r * d + j] - stats[2 * r]) * stats[2 * r + 1];
      s_dyx += static_cast<double>(g * xhat);
    }
  }
  if (stats != nullptr) {
    partial[(chunk * 2) * d + j] = s_dyx;
    partial[(chunk * 2 + 1) * d + j] = s_dy;
  } else {
    partial[chunk * d + j] = s_dy;
  }
}

// out_o[j] += sum over chunks (in order) of partial[chunk, o, j], o < outputs (1 or 2).
__global__ void __launch_bounds__(kThreads)
    ColumnReduceKernel(float* out0, float* out1, const double* partial, int64_t chunks, int d,
                       int outputs) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  for (int o = 0; o < outputs; ++o) {
    float* out = o == 0 ? out0 : out1;
    double s = 0.0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[(c * outputs + o) * d + j];
    out[j] = static_cast<float>(static_cast<double>(out[j]) + s);
  }
}

// dx: [rows, d] from dy, x, gamma and the row stats. dx may alias dy: each thread reads dy[j]
// before writing dx[j] for its own j only.
__global__ void __launch_bounds__(kThreads)
    LayerNormDxKernel(float* dx, const float* dy, const float* x, const float* gamma,
                      const float* stats, int d) {
  __shared__ double shared[32];
  const int64_t r = blockIdx.x;
  const float mean = stats[2 * r], rstd = stats[2 * r + 1];
  const float* xr = x + r * d;
  const float* dyr = dy + r * d;
  float* dxr = dx + r * d;
  double sg = 0.0, sgx = 0.0;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    const float xhat = (xr[j] - mean) * rstd;
    const float g = dyr[j] * gamma[j];
    sg += g;
    sgx += static_cast<double>(g * xhat);
  }
  sg = BlockSum(sg, shared);
  sgx = BlockSum(sgx, shared);
  const float mean_g = static_cast<float>(sg / d), mean_gx = static_cast<float>(sgx / d);
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    const float xhat = (xr[j] - mean) * rstd;
    dxr[j] = rstd * (dyr[j] * gamma[j] - mean_g - xhat * mean_gx);
  }
}

// ---------------------------------------------------------------------------------------------
// Elementwise

__global__ void ActivationBackwardKernel(float* dx, const float* dy, const float* pre,
                                         int64_t count, bool gelu) {
  constexpr float kC = 0.7978845608028654f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = pre[i];
    const float g = dy[i];
    if (gelu) {
      const float u = kC * (x + 0.044715f * x * x * x);
      const float t = tanhf(u);
      const float du = kC * (1.0f + 3.0f * 0.044715f * x * x);
      dx[i] = g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    } else {
      dx[i] = x > 0.0f ? g : 0.0f;
    }
  }
}

// Queues ColumnPartialsKernel and ColumnReduceKernel: out0 (and out1 for layer norm) += the
// column sums. stats null: plain column sums of dy.
absl::Status ColumnSums(Context& ctx, float* out0, float* out1, const float* dy, const float* x,
                        const float* stats, int64_t rows, int d) {
  const int outputs = stats != nullptr ? 2 : 1;
  const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  if (chunks > INT_MAX) return absl::InvalidArgumentError("cuda: too many rows");
  absl::StatusOr<DeviceBuffer> partial =
      Scratch(ctx, sizeof(double) * static_cast<size_t>(chunks) * outputs * d);
  if (!partial.ok()) return partial.status();
  const unsigned col_blocks = static_cast<unsigned>((d + kThreads - 1) / kThreads);
  const dim3 grid(static_cast<unsigned>(chunks), col_blocks);
  ColumnPartialsKernel<<<grid, kThreads, 0, ctx.stream()>>>(partial->as<double>(), dy, x, stats,
                                                            rows, d);
  TNMT_KERNEL_RETURN_IF_ERROR(TNMT_CUDA_LAUNCH_CHECK());
  ColumnReduceKernel<<<col_blocks, kThreads, 0, ctx.stream()>>>(out0, out1, partial->as<double>(),
                                                                chunks, d, outputs);
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace

absl::Status LayerNormBackward(Context& ctx, float* dx, float* dgamma, float* dbeta,
                               const float* dy, const float* x, const float* gamma, int64_t rows,
                               int d, float eps) {
  TNMT_KERNEL_RETURN_IF_ERROR(CheckCount("LayerNormBackward", rows));
  if (d < 1) return absl::InvalidArgumentError(absl::StrCat("cuda::LayerNormBackward: d ", d));
  if (rows > INT_MAX) return absl::InvalidArgumentError("cuda::LayerNormBackward: too many rows");
  if (rows == 0) return absl::OkStatus();
  absl::StatusOr<DeviceBuffer> stats = Scratch(ctx, sizeof(float) * 2 * static_cast<size_t>(rows));
  if (!stats.ok()) return stats.status();
  const unsigned blocks = static_cast<unsigned>(rows);
  LayerNormStatsKernel<<<blocks, kThreads, 0, ctx.stream()>>>(stats->as<float>(), x, d, eps);
  TNMT_KERNEL_RETURN_IF_ERROR(TNMT_CUDA_LAUNCH_CHECK());
  // Reads dy before LayerNormDxKernel may overwrite it (dx aliasing dy): stream order.
  TNMT_KERNEL_RETURN_IF_ERROR(ColumnSums(ctx, dgamma, dbeta, dy, x, stats->as<float>(), rows, d));
  LayerNormDxKernel<<<blocks, kThreads, 0, ctx.stream()>>>(dx, dy, x, gamma, stats->as<float>(), d);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status ActivationBackward(Context& ctx, float* dx, const float* dy, const float* pre,
                                int64_t count, Activation act) {
  if (!HasCudaKernel(act)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ActivationBackward: no CUDA kernel for ", ActivationName(act)));
  }
  const bool gelu = act == Activation::kGelu;
  TNMT_KERNEL_RETURN_IF_ERROR(CheckCount("ActivationBackward", count));
  if (count == 0) return absl::OkStatus();
  ActivationBackwardKernel<<<GridFor(count, kThreads), kThreads, 0, ctx.stream()>>>(dx, dy, pre,
                                                                                     count, gelu);
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status AccumulateColumnSum(Context& ctx, float* db, const float* dy, int64_t rows, int n) {
  TNMT_KERNEL_RETURN_IF_ERROR(CheckCount("AccumulateColumnSum", rows));
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("cuda::AccumulateColumnSum: n ", n));
  if (rows == 0 || n == 0) return absl::OkStatus();
  return ColumnSums(ctx, db, nullptr, dy, nullptr, nullptr, rows, n);
}

}  // namespace tnmt::kernels::cuda
