// The Adam update on the GPU; see adam.h. A grid-stride loop, each operation rounded on its
// own in the CPU's order; the bias corrections are computed on the host in double, as there.
#include "kernels/cuda/adam.h"

#include <cmath>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_common.cuh"

namespace tnmt::kernels::cuda {

namespace {

using internal::GridFor;

__global__ void AdamKernel(float* w, float* m, float* v, const float* g, int64_t count,
                           float grad_scale, float beta1, float beta2, float eps, float step_size,
                           float inv_sqrt_bc2) {
  const float one_b1 = 1.0f - beta1, one_b2 = 1.0f - beta2;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // The CPU's expression order, each operation rounded on its own (no FMA contraction).
    const float gi = __fmul_rn(g[i], grad_scale);
    const float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(one_b1, gi));
    const float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(one_b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), inv_sqrt_bc2), eps);
    w[i] = __fsub_rn(w[i], __fdiv_rn(__fmul_rn(step_size, mi), denom));
  }
}

}  // namespace

absl::Status AdamUpdate(Context& ctx, float* w, float* m, float* v, const float* g, int64_t count,
                        float grad_scale, const AdamOptions& o) {
  if (count < 0) return absl::InvalidArgumentError("cuda::AdamUpdate: negative count");
  if (count == 0) return absl::OkStatus();
  // Host-side constants exactly as the CPU computes them.
  const double bc1 = 1.0 - std::pow(static_cast<double>(o.beta1), static_cast<double>(o.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(o.beta2), static_cast<double>(o.step));
  const float step_size = static_cast<float>(o.lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  AdamKernel<<<GridFor(count, 256), 256, 0, ctx.stream()>>>(w, m, v, g, count, grad_scale, o.beta1,
                                                             o.beta2, o.eps, step_size,
                                                             inv_sqrt_bc2);
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace tnmt::kernels::cuda
