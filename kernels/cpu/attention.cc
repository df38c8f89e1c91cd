// Attention kernel; see attention.h. One query row at a time: scores for that row only
// (k_len floats of scratch), so memory stays linear in the key length even for very long
// inputs. A fully masked row (cannot happen with valid inputs) yields zeros.
#include "kernels/cpu/attention.h"

#include "kernels/cpu/simd.h"

#include <cmath>
#include <cstring>

namespace tnmt::kernels::cpu {

TNMT_VECTORIZE void MultiHeadAttention(float* out, int64_t ld_out, const float* q, int64_t ld_q, const float* k,
                        const float* v, int64_t ld_kv, int64_t kv_group_stride,
                        const AttentionArgs& a, float* scratch) {
  const int dh = a.d_head;
  for (int b = 0; b < a.batch; ++b) {
    const int g = a.kv_index != nullptr ? a.kv_index[b] : b;
    const int valid = a.k_valid != nullptr ? a.k_valid[g] : a.k_len;
    const float* kg = k + g * kv_group_stride;
    const float* vg = v + g * kv_group_stride;
    for (int i = 0; i < a.q_len; ++i) {
      int limit = valid;
      if (a.causal_offset >= 0 && i + a.causal_offset + 1 < limit) limit = i + a.causal_offset + 1;
      const int64_t row = static_cast<int64_t>(b) * a.q_len + i;
      for (int h = 0; h < a.num_heads; ++h) {
        const float* qh = q + row * ld_q + h * dh;
        float* oh = out + row * ld_out + h * dh;
        if (limit <= 0) {
          std::memset(oh, 0, sizeof(float) * dh);
          continue;
        }
        float mx = -INFINITY;
        for (int j = 0; j < limit; ++j) {
          const float* kj = kg + j * ld_kv + h * dh;
          float s = 0.0f;
#pragma omp simd reduction(+ : s)
          for (int c = 0; c < dh; ++c) s += qh[c] * kj[c];
          s *= a.scale;
          scratch[j] = s;
          mx = s > mx ? s : mx;
        }
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < limit; ++j) {
          scratch[j] = ExpApprox(scratch[j] - mx);
          sum += scratch[j];
        }
        const float inv = 1.0f / sum;
        std::memset(oh, 0, sizeof(float) * dh);
        for (int j = 0; j < limit; ++j) {
          const float p = scratch[j] * inv;
          const float* vj = vg + j * ld_kv + h * dh;
#pragma omp simd
          for (int c = 0; c < dh; ++c) oh[c] += p * vj[c];
        }
      }
    }
  }
}

}  // namespace tnmt::kernels::cpu
