// Dropout on the GPU; see dropout.h. A grid-stride loop; each element's keep bit is the
// counter hash of its index (kernels/counter_uniform.h), the CPU's bits.
#include "kernels/cuda/dropout.h"

#include <cstdint>

#include "kernels/counter_uniform.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_common.cuh"

namespace tnmt::kernels::cuda {

namespace {

using internal::GridFor;

__global__ void DropoutKernel(float* x, int64_t count, float p, float keep_scale, uint64_t seed,
                              uint64_t stream) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = CounterUniform(seed, stream, static_cast<uint64_t>(i)) >= p ? __fmul_rn(x[i], keep_scale)
                                                                       : 0.0f;
  }
}

}  // namespace

absl::Status Dropout(Context& ctx, float* x, int64_t count, float p, uint64_t seed,
                     uint64_t stream_id) {
  if (count < 0) return absl::InvalidArgumentError("cuda::Dropout: negative count");
  if (p <= 0.0f || count == 0) return absl::OkStatus();
  const float keep_scale = 1.0f / (1.0f - p);
  DropoutKernel<<<GridFor(count, 256), 256, 0, ctx.stream()>>>(x, count, p, keep_scale, seed,
                                                                stream_id);
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace tnmt::kernels::cuda
