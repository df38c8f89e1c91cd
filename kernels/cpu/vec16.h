// 16-float vectors on two x86 vector ISAs with identical arithmetic: AVX-512 holds one in a
// zmm register, AVX2 + FMA in two ymm halves (lo = lanes 0-7, hi = lanes 8-15). Each helper
// below performs the same IEEE operations per lane on both, and the horizontal sums and maxima
// use one fixed tree (the one _mm512_reduce_add_ps / _mm512_reduce_max_ps use), so a kernel
// written once per ISA with these helpers gives bit-identical results on CPUs with and without
// AVX-512. Used by attention.cc and elementwise.cc.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/simd.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), which -W(maybe-)uninitialized
// reports at every inlined use (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define TNMT_AVX512_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))
#define TNMT_AVX2_TARGET __attribute__((target("avx2,fma")))
// AVX-512 with the BF16 instructions (vdpbf16ps, vcvtneps2bf16): the bfloat16 GEMM and the loss
// that stores its gradient as bfloat16.
#define TNMT_BF16_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512bf16,avx2,fma")))

namespace tnmt::kernels::cpu::vec16 {

namespace avx512 {

inline __mmask16 TailMask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }

// ExpApprox (simd.h) on 16 lanes: same reduction and polynomial.
TNMT_AVX512_TARGET inline __m512 Exp16(__m512 x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_GE_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.33654f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.72283f));
  const __m512 shifter = _mm512_set1_ps(12582912.0f);
  const __m512 n =
      _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), shifter), shifter);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512i bits =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(bits));
}

TNMT_AVX512_TARGET inline float ReduceAdd(__m512 x) { return _mm512_reduce_add_ps(x); }
TNMT_AVX512_TARGET inline float ReduceMax(__m512 x) { return _mm512_reduce_max_ps(x); }

// Over x[0, n) (n >= 1) in 16-lane chunks: returns max(x) and sets *sum to the sum of
// exp(x - max) (Exp16), which are also written to out[0, n) when out is not null (out may be x).
// The softmax numerators of attention and the log-sum-exp of the output layer.
TNMT_AVX512_TARGET inline float MaxAndExpSum(const float* x, int n, float* out, float* sum) {
  // The maximum in four independent chains (a maximum of non-NaN values does not depend on
  // the order; one chain waited on each max's latency).
  __m512 mx = _mm512_set1_ps(-INFINITY), m1 = mx, m2 = mx, m3 = mx;
  int j = 0;
  for (; j + 64 <= n; j += 64) {
    mx = _mm512_max_ps(mx, _mm512_loadu_ps(x + j));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + j + 16));
    m2 = _mm512_max_ps(m2, _mm512_loadu_ps(x + j + 32));
    m3 = _mm512_max_ps(m3, _mm512_loadu_ps(x + j + 48));
  }
  mx = _mm512_max_ps(_mm512_max_ps(mx, m1), _mm512_max_ps(m2, m3));
  for (; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? static_cast<__mmask16>(0xFFFF) : TailMask(n - j);
    mx = _mm512_mask_max_ps(mx, m, mx, _mm512_maskz_loadu_ps(m, x + j));
  }
  const float max = ReduceMax(mx);
  const __m512 vmax = _mm512_set1_ps(max);
  __m512 acc = _mm512_setzero_ps();
  for (int j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? static_cast<__mmask16>(0xFFFF) : TailMask(n - j);
    const __m512 e = _mm512_maskz_mov_ps(m, Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), vmax)));
    if (out != nullptr) _mm512_mask_storeu_ps(out + j, m, e);
    acc = _mm512_add_ps(acc, e);
  }
  *sum = ReduceAdd(acc);
  return max;
}

}  // namespace avx512

namespace avx2 {

// Lane masks of the halves of a 16-lane vector whose first n lanes (0 to 16) are selected.
TNMT_AVX2_TARGET inline __m256i LoMask(int n) { return Avx2LaneMask(n); }
TNMT_AVX2_TARGET inline __m256i HiMask(int n) { return Avx2LaneMask(n - 8); }

// Keeps GCC from contracting a product into a following sum (the AVX-512 code rounds the
// product first wherever the AVX2 code passes it through here).
TNMT_AVX2_TARGET inline __m256 Rounded(__m256 x) {
  asm("" : "+x"(x));
  return x;
}

// avx512::Exp16 on 8 lanes.
TNMT_AVX2_TARGET inline __m256 Exp8(__m256 x) {
  const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_GE_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.33654f));
  x = _mm256_min_ps(x, _mm256_set1_ps(88.72283f));
  const __m256 shifter = _mm256_set1_ps(12582912.0f);
  const __m256 n =
      _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), shifter), shifter);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(Rounded(_mm256_mul_ps(p, _mm256_castsi256_ps(bits))), keep);
}

// avx512::ReduceAdd / ReduceMax of the 16 lanes (lo, hi), in their order.
TNMT_AVX2_TARGET inline float ReduceAdd(__m256 lo, __m256 hi) {
  const __m256 t3 = _mm256_add_ps(hi, lo);
  const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, _MM_SHUFFLE(1, 1, 1, 1)));
}

TNMT_AVX2_TARGET inline float ReduceMax(__m256 lo, __m256 hi) {
  const __m256 t3 = _mm256_max_ps(hi, lo);
  const __m128 t6 = _mm_max_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  const __m128 t8 = _mm_max_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m128 t10 = _mm_max_ps(t8, _mm_shuffle_ps(t8, t8, _MM_SHUFFLE(0, 1, 0, 1)));
  return _mm_cvtss_f32(t10);
}

// avx512::MaxAndExpSum on halves.
TNMT_AVX2_TARGET inline float MaxAndExpSum(const float* x, int n, float* out, float* sum) {
  // As avx512::MaxAndExpSum: four independent chains over whole 32-float blocks first.
  __m256 ml = _mm256_set1_ps(-INFINITY), mh = ml, a1 = ml, a2 = ml, a3 = ml, a4 = ml, a5 = ml, a6 = ml;
  int j = 0;
  for (; j + 64 <= n; j += 64) {
    ml = _mm256_max_ps(ml, _mm256_loadu_ps(x + j));
    mh = _mm256_max_ps(mh, _mm256_loadu_ps(x + j + 8));
    a1 = _mm256_max_ps(a1, _mm256_loadu_ps(x + j + 16));
    a2 = _mm256_max_ps(a2, _mm256_loadu_ps(x + j + 24));
    a3 = _mm256_max_ps(a3, _mm256_loadu_ps(x + j + 32));
    a4 = _mm256_max_ps(a4, _mm256_loadu_ps(x + j + 40));
    a5 = _mm256_max_ps(a5, _mm256_loadu_ps(x + j + 48));
    a6 = _mm256_max_ps(a6, _mm256_loadu_ps(x + j + 56));
  }
  ml = _mm256_max_ps(_mm256_max_ps(ml, a1), _mm256_max_ps(a3, a5));
  mh = _mm256_max_ps(_mm256_max_ps(mh, a2), _mm256_max_ps(a4, a6));
  for (; j < n; j += 16) {
    const __m256i kl = LoMask(n - j), kh = HiMask(n - j);
    ml = _mm256_blendv_ps(ml, _mm256_max_ps(ml, _mm256_maskload_ps(x + j, kl)), _mm256_castsi256_ps(kl));
    mh = _mm256_blendv_ps(mh, _mm256_max_ps(mh, _mm256_maskload_ps(x + j + 8, kh)), _mm256_castsi256_ps(kh));
  }
  const float max = ReduceMax(ml, mh);
  const __m256 vmax = _mm256_set1_ps(max);
  __m256 sl = _mm256_setzero_ps(), sh = sl;
  for (int j = 0; j < n; j += 16) {
    const __m256i kl = LoMask(n - j), kh = HiMask(n - j);
    const __m256 el = _mm256_and_ps(_mm256_castsi256_ps(kl), Exp8(_mm256_sub_ps(_mm256_maskload_ps(x + j, kl), vmax)));
    const __m256 eh = _mm256_and_ps(_mm256_castsi256_ps(kh), Exp8(_mm256_sub_ps(_mm256_maskload_ps(x + j + 8, kh), vmax)));
    if (out != nullptr) {
      Avx2StoreFirst(out + j, n - j, el);
      Avx2StoreFirst(out + j + 8, n - j - 8, eh);
    }
    sl = _mm256_add_ps(sl, el);
    sh = _mm256_add_ps(sh, eh);
  }
  *sum = ReduceAdd(sl, sh);
  return max;
}

}  // namespace avx2

}  // namespace tnmt::kernels::cpu::vec16

#endif  // __x86_64__
