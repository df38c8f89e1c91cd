// The Adam update; see adam.h.
#include "kernels/cpu/adam.h"

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

#include <cmath>

namespace tnmt::kernels::cpu {

namespace {

TNMT_VECTORIZE void AdamRange(float* w, float* m, float* v, const float* g, int64_t begin, int64_t end,
                              float grad_scale, const AdamOptions& o, float step_size, float inv_sqrt_bc2) {
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i] * grad_scale;
    m[i] = o.beta1 * m[i] + (1.0f - o.beta1) * gi;
    v[i] = o.beta2 * v[i] + (1.0f - o.beta2) * gi * gi;
    w[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + o.eps);
  }
}

}  // namespace

void AdamUpdate(float* w, float* m, float* v, const float* g, int64_t count, float grad_scale,
                const AdamOptions& o) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(o.beta1), static_cast<double>(o.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(o.beta2), static_cast<double>(o.step));
  const float step_size = static_cast<float>(o.lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  ParallelForLarge(count, 1, [&](int64_t begin, int64_t end) {
    AdamRange(w, m, v, g, begin, end, grad_scale, o, step_size, inv_sqrt_bc2);
  });
}

}  // namespace tnmt::kernels::cpu
