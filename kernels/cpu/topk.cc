// RowTopK; see topk.h.
#include "kernels/cpu/topk.h"

#include <limits>

#include "kernels/cpu/simd.h"

namespace tnmt::kernels::cpu {

namespace {

// Whether any of x[0, 16) is above t (vectorized; NaN is never above).
TNMT_VECTORIZE bool AnyAbove16(const float* x, float t) {
  bool any = false;
  for (int j = 0; j < 16; ++j) any |= x[j] > t;
  return any;
}

}  // namespace

void RowTopK(const float* logits, int vocab, int k, int32_t exclude, float* top_logit,
             int32_t* top_id) {
  int n = 0;
  float threshold = -std::numeric_limits<float>::infinity();
  for (int32_t tok = 0; tok < vocab; ++tok) {
    // Once the list is full, skip 16 at a time while nothing beats its last entry (the
    // threshold only rises, so skipped tokens could never have entered).
    while (n == k && tok % 16 == 0 && tok + 16 <= vocab && !AnyAbove16(logits + tok, threshold)) tok += 16;
    if (tok >= vocab) break;
    const float v = logits[tok];
    if (n == k && !(v > threshold)) continue;
    if (tok == exclude) continue;
    int pos = n == k ? k - 1 : n;  // insertion point: after every value >= v
    while (pos > 0 && top_logit[pos - 1] < v) {
      top_logit[pos] = top_logit[pos - 1];
      top_id[pos] = top_id[pos - 1];
      --pos;
    }
    top_logit[pos] = v;
    top_id[pos] = tok;
    if (n < k) ++n;
    if (n == k) threshold = top_logit[k - 1];
  }
  for (; n < k; ++n) {  // fewer eligible tokens than k (tiny vocabularies)
    top_logit[n] = -std::numeric_limits<float>::infinity();
    top_id[n] = exclude;
  }
}

}  // namespace tnmt::kernels::cpu
