// Attention kernel; see attention.h. One query row at a time: scores for that row only
// (k_len floats of scratch), so memory stays linear in the key length even for very long
// inputs. A fully masked row (cannot happen with valid inputs) yields zeros.
#include "kernels/cpu/attention.h"

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace tnmt::kernels::cpu {

namespace {

// Query groups [b_begin, b_end) of MultiHeadAttention.
TNMT_VECTORIZE void AttentionGroups(float* out, int64_t ld_out, const float* q, int64_t ld_q,
                                    const float* k, const float* v, int64_t ld_kv,
                                    int64_t kv_group_stride, const AttentionArgs& a, int b_begin,
                                    int b_end, float* scratch) {
  const int dh = a.d_head;
  for (int b = b_begin; b < b_end; ++b) {
    const int g = a.kv_index != nullptr ? a.kv_index[b] : b;
    const int valid = a.k_valid != nullptr ? a.k_valid[g] : a.k_len;
    const int32_t* groups = a.k_groups != nullptr ? a.k_groups + b * a.k_groups_stride : nullptr;
    auto key_row = [&](int j) -> int64_t {
      return (groups != nullptr ? groups[j] : g) * kv_group_stride + j * ld_kv;
    };
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
          const float* kj = k + key_row(j) + h * dh;
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
          const float* vj = v + key_row(j) + h * dh;
#pragma omp simd
          for (int c = 0; c < dh; ++c) oh[c] += p * vj[c];
        }
      }
    }
  }
}

}  // namespace

void MultiHeadAttention(float* out, int64_t ld_out, const float* q, int64_t ld_q, const float* k,
                        const float* v, int64_t ld_kv, int64_t kv_group_stride,
                        const AttentionArgs& a, float* /*scratch*/) {
  ParallelFor(a.batch, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(a.k_len > 0 ? a.k_len : 1);
    AttentionGroups(out, ld_out, q, ld_q, k, v, ld_kv, kv_group_stride, a, static_cast<int>(begin),
                    static_cast<int>(end), scores.data());
  });
}

}  // namespace tnmt::kernels::cpu
