// Random fill; see random.h.
#include "kernels/cuda/random.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/check.h"

namespace tnmt::kernels::cuda {

namespace {

__device__ __forceinline__ float Uniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

__device__ __forceinline__ void Store(float* x, int64_t i, float v) { x[i] = v; }
__device__ __forceinline__ void Store(__half* x, int64_t i, float v) { x[i] = __float2half_rn(v); }
__device__ __forceinline__ void Store(__nv_bfloat16* x, int64_t i, float v) {
  x[i] = __float2bfloat16_rn(v);
}

template <typename T>
__global__ void FillKernel(T* x, int64_t count, float lo, float span, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Store(x, i, lo + span * Uniform(seed, static_cast<uint64_t>(i)));
  }
}

}  // namespace

absl::Status FillUniform(Context& ctx, void* x, DType type, int64_t count, float lo, float hi,
                         uint64_t seed) {
  cudaStream_t stream = ctx.stream();
  if (count <= 0) return absl::OkStatus();
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, 132 * 32));
  switch (type) {
    case DType::kFloat16:
      FillKernel<<<blocks, 256, 0, stream>>>(static_cast<__half*>(x), count, lo, hi - lo, seed);
      break;
    case DType::kBFloat16:
      FillKernel<<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(x), count, lo, hi - lo, seed);
      break;
    default:
      FillKernel<<<blocks, 256, 0, stream>>>(static_cast<float*>(x), count, lo, hi - lo, seed);
  }
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace tnmt::kernels::cuda
