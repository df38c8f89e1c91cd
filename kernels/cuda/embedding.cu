// Embedding kernels; see embedding.h.
#include "kernels/cuda/embedding.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/check.h"

namespace tnmt::kernels::cuda {

namespace {

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__global__ void EmbedKernel(float* out, const int32_t* ids, const int32_t* positions,
                            const T* table, const float* pos, int d, float scale) {
  const int64_t i = blockIdx.x;
  const T* e = table + static_cast<int64_t>(ids[i]) * d;
  float* o = out + i * d;
  const float* p = pos != nullptr ? pos + static_cast<int64_t>(positions[i]) * d : nullptr;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    // Rounded as the CPU's e * scale + p (no fused multiply-add).
    const float v = __fmul_rn(ToFloat(e[j]), scale);
    o[j] = p != nullptr ? __fadd_rn(v, p[j]) : v;
  }
}

__global__ void SinusoidalKernel(float* table, int d) {
  const int64_t p = blockIdx.x;
  for (int i = threadIdx.x; 2 * i < d; i += blockDim.x) {
    const double freq = pow(10000.0, -2.0 * i / d);
    table[p * d + 2 * i] = static_cast<float>(sin(p * freq));
    if (2 * i + 1 < d) table[p * d + 2 * i + 1] = static_cast<float>(cos(p * freq));
  }
}

}  // namespace

absl::Status EmbedTokens(Context& ctx, float* out, const int32_t* ids, const int32_t* positions,
                         int64_t count, const void* table, DType table_type, const float* pos,
                         int d, float scale) {
  cudaStream_t stream = ctx.stream();
  if (count < 0 || d < 0) return absl::InvalidArgumentError("cuda::EmbedTokens: negative size");
  if (count == 0 || d == 0) return absl::OkStatus();
  if (count > 0x7fffffff) return absl::InvalidArgumentError("cuda::EmbedTokens: too many tokens");
  const unsigned blocks = static_cast<unsigned>(count);
  const int threads = std::min(256, (d + 31) / 32 * 32);
  switch (table_type) {
    case DType::kFloat16:
      EmbedKernel<<<blocks, threads, 0, stream>>>(out, ids, positions,
                                                  static_cast<const __half*>(table), pos, d, scale);
      break;
    case DType::kBFloat16:
      EmbedKernel<<<blocks, threads, 0, stream>>>(
          out, ids, positions, static_cast<const __nv_bfloat16*>(table), pos, d, scale);
      break;
    default:
      EmbedKernel<<<blocks, threads, 0, stream>>>(out, ids, positions,
                                                  static_cast<const float*>(table), pos, d, scale);
  }
  return TNMT_CUDA_LAUNCH_CHECK();
}

absl::Status SinusoidalPositions(Context& ctx, float* table, int rows, int d) {
  cudaStream_t stream = ctx.stream();
  if (rows < 0 || d < 0) return absl::InvalidArgumentError("cuda::SinusoidalPositions: negative size");
  if (rows == 0 || d == 0) return absl::OkStatus();
  SinusoidalKernel<<<rows, 128, 0, stream>>>(table, d);
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace tnmt::kernels::cuda
