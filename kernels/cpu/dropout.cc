// Dropout from the counter hash (kernels/counter_uniform.h); see dropout.h.
#include "kernels/cpu/dropout.h"

#include "kernels/counter_uniform.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vec16.h"

#include <algorithm>
#include <cstdint>

namespace tnmt::kernels::cpu {

namespace {

// y[t] = drop(x[t]) (+ add[t] when add is not null) for t in [0, n), where x[t] is element
// index0 + t of the tensor the mask is defined over. y may be x; add is not y. (The sum in a
// second loop: in one, the compiler may fuse the scale and the sum into one FMA, which rounds
// differently from the vector paths' product and then sum.)
TNMT_VECTORIZE void DropoutRange(float* y, const float* x, const float* add, int64_t n, uint64_t index0, float p,
                                 uint64_t seed, uint64_t stream) {
  const float keep_scale = 1.0f / (1.0f - p);
  for (int64_t t = 0; t < n; ++t) {
    y[t] = CounterUniform(seed, stream, index0 + static_cast<uint64_t>(t)) >= p ? x[t] * keep_scale : 0.0f;
  }
  if (add != nullptr) {
    for (int64_t t = 0; t < n; ++t) y[t] += add[t];
  }
}

#if defined(__x86_64__)
// Elements [i, n) of the vector paths' DropoutRange, one at a time (x86: the asm keeps the
// product rounded before the sum, as in the vectors, where GCC might fuse them into an FMA).
inline void DropoutTail(float* y, const float* x, const float* add, int64_t i, int64_t n, uint64_t index0, float p,
                        uint64_t seed, uint64_t stream) {
  const float keep_scale = 1.0f / (1.0f - p);
  for (; i < n; ++i) {
    float d = CounterUniform(seed, stream, index0 + static_cast<uint64_t>(i)) >= p ? x[i] * keep_scale : 0.0f;
    asm("" : "+x"(d));
    y[i] = add != nullptr ? d + add[i] : d;
  }
}

namespace avx2 {

// a * b mod 2^64 per 64-bit lane (AVX2 has no 64-bit multiply): lo*lo + ((hi*lo + lo*hi) << 32).
TNMT_AVX2_TARGET inline __m256i Mul64(__m256i a, __m256i b) {
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                         _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
  return _mm256_add_epi64(_mm256_mul_epu32(a, b), _mm256_slli_epi64(cross, 32));
}

// CounterUniform(seed, stream, i) for the 4 indices whose hash input is z (its 64-bit
// arithmetic exactly, so the masks equal the scalar ones), as floats in lanes 0-3.
TNMT_AVX2_TARGET inline __m128 Uniform4(__m256i z) {
  const __m256i m1 = _mm256_set1_epi64x(static_cast<int64_t>(kCounterMix1));
  const __m256i m2 = _mm256_set1_epi64x(static_cast<int64_t>(kCounterMix2));
  z = Mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), m1);
  z = Mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), m2);
  z = _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
  const __m256i top = _mm256_srli_epi64(z, 40);  // 24 bits, in the low half of each lane
  const __m256i packed = _mm256_permutevar8x32_epi32(top, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
  return _mm_mul_ps(_mm_cvtepi32_ps(_mm256_castsi256_si128(packed)), _mm_set1_ps(1.0f / 16777216.0f));
}

// DropoutRange with the hash vectorized: 8 elements per step, same masks and values.
TNMT_AVX2_TARGET void DropoutRange(float* y, const float* x, const float* add, int64_t n, uint64_t index0, float p,
                                   uint64_t seed, uint64_t stream) {
  constexpr uint64_t kGolden = kCounterStep;
  const float keep_scale = 1.0f / (1.0f - p);
  const uint64_t base = CounterStart(seed, stream);
  const __m256 vp = _mm256_set1_ps(p), vscale = _mm256_set1_ps(keep_scale);
  int64_t i = 0;
  if (n >= 8) {
    const uint64_t z0 = base + index0 * kGolden;
    __m256i lo = _mm256_setr_epi64x(static_cast<int64_t>(z0), static_cast<int64_t>(z0 + kGolden),
                                    static_cast<int64_t>(z0 + 2 * kGolden), static_cast<int64_t>(z0 + 3 * kGolden));
    __m256i hi = _mm256_add_epi64(lo, _mm256_set1_epi64x(static_cast<int64_t>(4 * kGolden)));
    const __m256i step = _mm256_set1_epi64x(static_cast<int64_t>(8 * kGolden));
    for (; i + 8 <= n; i += 8) {
      const __m256 u = _mm256_set_m128(Uniform4(hi), Uniform4(lo));
      const __m256 keep = _mm256_cmp_ps(u, vp, _CMP_GE_OQ);
      const __m256 d = _mm256_and_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vscale), keep);
      _mm256_storeu_ps(y + i, add != nullptr ? _mm256_add_ps(d, _mm256_loadu_ps(add + i)) : d);
      lo = _mm256_add_epi64(lo, step);
      hi = _mm256_add_epi64(hi, step);
    }
  }
  DropoutTail(y, x, add, i, n, index0, p, seed, stream);
}

}  // namespace avx2

namespace avx512 {

// CounterUniform for the 8 indices whose hash input is z (its 64-bit arithmetic exactly, with
// AVX-512's 64-bit multiply), as floats.
TNMT_AVX512_TARGET inline __m256 Uniform8(__m512i z) {
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
                         _mm512_set1_epi64(static_cast<int64_t>(kCounterMix1)));
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
                         _mm512_set1_epi64(static_cast<int64_t>(kCounterMix2)));
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
  const __m256i top = _mm512_cvtepi64_epi32(_mm512_srli_epi64(z, 40));  // 24 bits per lane
  return _mm256_mul_ps(_mm256_cvtepi32_ps(top), _mm256_set1_ps(1.0f / 16777216.0f));
}

// DropoutRange with the hash vectorized by hand: 16 elements per step, each hash input one
// add from the previous (the compiler's vectorization of the scalar loop recomputes it from the
// index), same masks and values.
TNMT_AVX512_TARGET void DropoutRange(float* y, const float* x, const float* add, int64_t n, uint64_t index0, float p,
                                     uint64_t seed, uint64_t stream) {
  const float keep_scale = 1.0f / (1.0f - p);
  int64_t i = 0;
  if (n >= 16) {
    const uint64_t z0 = CounterStart(seed, stream) + index0 * kCounterStep;
    __m512i lo = _mm512_add_epi64(
        _mm512_set1_epi64(static_cast<int64_t>(z0)),
        _mm512_mullo_epi64(_mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7), _mm512_set1_epi64(static_cast<int64_t>(kCounterStep))));
    __m512i hi = _mm512_add_epi64(lo, _mm512_set1_epi64(static_cast<int64_t>(8 * kCounterStep)));
    const __m512i step = _mm512_set1_epi64(static_cast<int64_t>(16 * kCounterStep));
    const __m512 vp = _mm512_set1_ps(p), vscale = _mm512_set1_ps(keep_scale);
    for (; i + 16 <= n; i += 16) {
      const __m512 u = _mm512_insertf32x8(_mm512_castps256_ps512(Uniform8(lo)), Uniform8(hi), 1);
      const __mmask16 keep = _mm512_cmp_ps_mask(u, vp, _CMP_GE_OQ);
      const __m512 d = _mm512_maskz_mul_ps(keep, _mm512_loadu_ps(x + i), vscale);
      _mm512_storeu_ps(y + i, add != nullptr ? _mm512_add_ps(d, _mm512_loadu_ps(add + i)) : d);
      lo = _mm512_add_epi64(lo, step);
      hi = _mm512_add_epi64(hi, step);
    }
  }
  DropoutTail(y, x, add, i, n, index0, p, seed, stream);
}

}  // namespace avx512
#endif

// DropoutRange on this CPU's path (elements [first_index, first_index + count) of the mask).
void DropoutRangeAnyIsa(float* y, const float* x, const float* add, int64_t count, uint64_t first_index, float p,
                        uint64_t seed, uint64_t stream) {
#if defined(__x86_64__)
  if (UseAvx512()) {
    avx512::DropoutRange(y, x, add, count, first_index, p, seed, stream);
    return;
  }
  if (UseAvx2()) {
    avx2::DropoutRange(y, x, add, count, first_index, p, seed, stream);
    return;
  }
#endif
  DropoutRange(y, x, add, count, first_index, p, seed, stream);
}

// y = drop(x) (+ add) over the compute threads.
void DropoutParallel(float* y, const float* x, const float* add, int64_t count, float p, uint64_t seed,
                     uint64_t stream) {
  ParallelFor(count, [&](int64_t begin, int64_t end) {
    DropoutRangeAnyIsa(y + begin, x + begin, add != nullptr ? add + begin : nullptr, end - begin,
                       static_cast<uint64_t>(begin), p, seed, stream);
  });
}

}  // namespace

void DropoutBlock(float* x, int64_t count, uint64_t first_index, float p, uint64_t seed, uint64_t stream) {
  if (p <= 0.0f || count <= 0) return;
  DropoutRangeAnyIsa(x, x, nullptr, count, first_index, p, seed, stream);
}

void Dropout(float* x, int64_t count, float p, uint64_t seed, uint64_t stream) {
  if (p <= 0.0f) return;
  DropoutParallel(x, x, nullptr, count, p, seed, stream);
}

void DropoutFrom(float* y, const float* x, int64_t count, float p, uint64_t seed, uint64_t stream) {
  if (p <= 0.0f) {
    if (y != x) Copy(y, x, count);
    return;
  }
  DropoutParallel(y, x, nullptr, count, p, seed, stream);
}

void DropoutAdd(float* y, const float* x, int64_t count, float p, uint64_t seed, uint64_t stream) {
  if (p <= 0.0f) {
    Add(y, y, x, count);
    return;
  }
  DropoutParallel(y, y, x, count, p, seed, stream);
}

}  // namespace tnmt::kernels::cpu
