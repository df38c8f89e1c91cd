// Device dtype conversion; see convert.h.
#include "kernels/cuda/convert.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"

namespace tnmt::kernels::cuda {

namespace {

__device__ __forceinline__ float Load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float Load(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float Load(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}

// Widening to float is exact; narrowing is the hardware's round-to-nearest-even conversion,
// which handles overflow (inf) and subnormal results as IEEE 754. NaN becomes canonical.
__device__ __forceinline__ void Store(float* p, int64_t i, float v) {
  p[i] = isnan(v) ? __int_as_float(0x7fc00000) : v;
}
__device__ __forceinline__ void Store(__half* p, int64_t i, float v) {
  p[i] = isnan(v) ? __ushort_as_half(static_cast<unsigned short>(0x7e00)) : __float2half_rn(v);
}
__device__ __forceinline__ void Store(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = isnan(v) ? __ushort_as_bfloat16(static_cast<unsigned short>(0x7fc0))
                  : __float2bfloat16_rn(v);
}

// dst: [count] = src: [count] converted through float (exact for the widening step, so each
// element is rounded once).
template <typename D, typename S>
__global__ void ConvertKernel(D* __restrict__ dst, const S* __restrict__ src, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Store(dst, i, Load(src, i));
  }
}

constexpr int kThreads = 256;

template <typename D, typename S>
absl::Status Launch(void* dst, const void* src, int64_t count, cudaStream_t stream) {
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((count + kThreads - 1) / kThreads, 132 * 16));
  ConvertKernel<D, S><<<blocks, kThreads, 0, stream>>>(static_cast<D*>(dst),
                                                       static_cast<const S*>(src), count);
  return TNMT_CUDA_LAUNCH_CHECK();
}

template <typename D>
absl::Status LaunchFrom(void* dst, const void* src, DType src_type, int64_t count,
                        cudaStream_t stream) {
  switch (src_type) {
    case DType::kFloat32:
      return Launch<D, float>(dst, src, count, stream);
    case DType::kFloat16:
      return Launch<D, __half>(dst, src, count, stream);
    case DType::kBFloat16:
      return Launch<D, __nv_bfloat16>(dst, src, count, stream);
  }
  return absl::InvalidArgumentError("cuda::Convert: unknown source dtype");
}

}  // namespace

absl::Status Convert(Context& ctx, void* dst, DType dst_type, const void* src, DType src_type,
                     int64_t count) {
  cudaStream_t stream = ctx.stream();
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::Convert: negative count ", count));
  }
  if (count == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError("cuda::Convert: null pointer");
  }
  if (dst_type == src_type) {
    if (dst == src) return absl::OkStatus();
    return TNMT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(count) * DTypeBytes(dst_type),
                                           cudaMemcpyDeviceToDevice, stream));
  }
  switch (dst_type) {
    case DType::kFloat32:
      return LaunchFrom<float>(dst, src, src_type, count, stream);
    case DType::kFloat16:
      return LaunchFrom<__half>(dst, src, src_type, count, stream);
    case DType::kBFloat16:
      return LaunchFrom<__nv_bfloat16>(dst, src, src_type, count, stream);
  }
  return absl::InvalidArgumentError("cuda::Convert: unknown destination dtype");
}

}  // namespace tnmt::kernels::cuda
