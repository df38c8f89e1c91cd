// TopK; see topk.h.
//
// One pass over the row in index order. Once the list holds k entries, only a value above its
// last entry (the threshold, which only rises) can enter, so whole blocks of 16 with nothing
// above the threshold are skipped by a vector compare (AVX-512: one compare per block, four
// blocks per iteration; AVX2: two halves; portable: a loop). The blocks that do hold a
// candidate are walked one value at a time, so the list, ties included, is the same on every
// path.
#include "kernels/cpu/topk.h"

#include <limits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace tnmt::kernels::cpu {

namespace {

// The first tok' = tok + 16 j (j >= 0) whose block x[tok', tok' + 16) holds a value above t,
// or the first tok' with tok' + 16 > n when no full block does. NaN is never above.
using SkipFn = int (*)(const float* x, int tok, int n, float t);

int SkipPortable(const float* x, int tok, int n, float t) {
  for (; tok + 16 <= n; tok += 16) {
    bool any = false;
    for (int j = 0; j < 16; ++j) any |= x[tok + j] > t;
    if (any) return tok;
  }
  return tok;
}

#if defined(__x86_64__)

__attribute__((target("avx512f"))) int SkipAvx512(const float* x, int tok, int n, float t) {
  const __m512 vt = _mm512_set1_ps(t);
  for (; tok + 64 <= n; tok += 64) {
    const __mmask16 a = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + tok), vt, _CMP_GT_OQ);
    const __mmask16 b = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + tok + 16), vt, _CMP_GT_OQ);
    const __mmask16 c = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + tok + 32), vt, _CMP_GT_OQ);
    const __mmask16 d = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + tok + 48), vt, _CMP_GT_OQ);
    if ((a | b | c | d) != 0) {
      if (a) return tok;
      if (b) return tok + 16;
      if (c) return tok + 32;
      return tok + 48;
    }
  }
  for (; tok + 16 <= n; tok += 16) {
    if (_mm512_cmp_ps_mask(_mm512_loadu_ps(x + tok), vt, _CMP_GT_OQ) != 0) return tok;
  }
  return tok;
}

__attribute__((target("avx2"))) int SkipAvx2(const float* x, int tok, int n, float t) {
  const __m256 vt = _mm256_set1_ps(t);
  for (; tok + 16 <= n; tok += 16) {
    const __m256 lo = _mm256_cmp_ps(_mm256_loadu_ps(x + tok), vt, _CMP_GT_OQ);
    const __m256 hi = _mm256_cmp_ps(_mm256_loadu_ps(x + tok + 8), vt, _CMP_GT_OQ);
    if (_mm256_movemask_ps(_mm256_or_ps(lo, hi)) != 0) return tok;
  }
  return tok;
}

#endif

SkipFn ActiveSkip() {
#if defined(__x86_64__)
  if (UseAvx512()) return SkipAvx512;
  if (UseAvx2()) return SkipAvx2;
#endif
  return SkipPortable;
}

// TopK of one row: logits[0, vocab) into top_logit, top_id[0, k).
void RowTopK(const float* logits, int vocab, int k, int32_t exclude, float* top_logit,
             int32_t* top_id) {
  const SkipFn skip = ActiveSkip();
  int n = 0;
  float threshold = -std::numeric_limits<float>::infinity();
  for (int32_t tok = 0; tok < vocab; ++tok) {
    // Once the list is full, skip 16 at a time while nothing beats its last entry (the
    // threshold only rises, so skipped tokens could never have entered).
    if (n == k && tok % 16 == 0) {
      tok = skip(logits, tok, vocab, threshold);
      if (tok >= vocab) break;
    }
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

}  // namespace

void TopK(float* values, int32_t* ids, const float* x, int64_t rows, int n, int k, int32_t exclude) {
  for (int64_t r = 0; r < rows; ++r) RowTopK(x + r * n, n, k, exclude, values + r * k, ids + r * k);
}

}  // namespace tnmt::kernels::cpu
