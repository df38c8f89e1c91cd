// Attention kernel; see attention.h. One query row at a time: scores for that row only
// (num_heads x k_len floats of scratch), so memory stays linear in the key length even for long
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
    const int32_t* groups = a.k_groups != nullptr ? a.k_groups + g * a.k_groups_stride : nullptr;
    auto key_row = [&](int j) -> int64_t {
      return (groups != nullptr ? groups[j] : g) * kv_group_stride + j * ld_kv;
    };
    for (int i = 0; i < a.q_len; ++i) {
      int limit = valid;
      if (a.causal_offset >= 0 && i + a.causal_offset + 1 < limit) limit = i + a.causal_offset + 1;
      const int64_t row = static_cast<int64_t>(b) * a.q_len + i;
      const float* qr = q + row * ld_q;
      float* orow = out + row * ld_out;
      std::memset(orow, 0, sizeof(float) * a.num_heads * dh);
      if (limit <= 0) continue;
      // Keys outer, heads inner: each key's row (all heads) is read once, contiguously.
      // scratch: [num_heads, k_len] scores, then probabilities.
      for (int j = 0; j < limit; ++j) {
        const float* kj = k + key_row(j);
        for (int h = 0; h < a.num_heads; ++h) {
          const float* qh = qr + h * dh;
          const float* kh = kj + h * dh;
          float s = 0.0f;
#pragma omp simd reduction(+ : s)
          for (int c = 0; c < dh; ++c) s += qh[c] * kh[c];
          scratch[static_cast<int64_t>(h) * a.k_len + j] = s * a.scale;
        }
      }
      for (int h = 0; h < a.num_heads; ++h) {
        float* sh = scratch + static_cast<int64_t>(h) * a.k_len;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < limit; ++j) mx = sh[j] > mx ? sh[j] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < limit; ++j) {
          sh[j] = ExpApprox(sh[j] - mx);
          sum += sh[j];
        }
        const float inv = 1.0f / sum;
#pragma omp simd
        for (int j = 0; j < limit; ++j) sh[j] *= inv;
      }
      for (int j = 0; j < limit; ++j) {
        const float* vj = v + key_row(j);
        for (int h = 0; h < a.num_heads; ++h) {
          const float p = scratch[static_cast<int64_t>(h) * a.k_len + j];
          const float* vh = vj + h * dh;
          float* oh = orow + h * dh;
#pragma omp simd
          for (int c = 0; c < dh; ++c) oh[c] += p * vh[c];
        }
      }
    }
  }
}

}  // namespace

void MultiHeadAttention(float* out, int64_t ld_out, const float* q, int64_t ld_q, const float* k,
                        const float* v, int64_t ld_kv, int64_t kv_group_stride,
                        const AttentionArgs& a) {
  ParallelFor(a.batch, [&](int64_t begin, int64_t end) {
    // Per thread, reused across calls: no allocation on the decode path.
    thread_local std::vector<float> scores;
    scores.resize(static_cast<size_t>(a.num_heads) * (a.k_len > 0 ? a.k_len : 1));
    AttentionGroups(out, ld_out, q, ld_q, k, v, ld_kv, kv_group_stride, a, static_cast<int>(begin),
                    static_cast<int>(end), scores.data());
  });
}

}  // namespace tnmt::kernels::cpu
