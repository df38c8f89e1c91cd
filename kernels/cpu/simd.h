// Helpers for vectorized CPU loops: a target_clones attribute (one build runs AVX-512, AVX2 or
// baseline code, chosen at load time by the CPU) and an exp that vectorizes (no libm call).
#pragma once

#include <cstdint>
#include <cstring>

// Hot loops are compiled three times and dispatched by CPU features: x86-64-v4 (AVX-512),
// x86-64-v3 (AVX2 + FMA) or the baseline. (ISA levels, not CPU names: GCC 12 resolves
// "arch=skylake-avx512" by CPU model and does not recognise newer Xeons, e.g. model 207.)
#define TNMT_VECTORIZE __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tnmt::kernels::cpu {

#if defined(__x86_64__)
// Lanes [0, valid) of an AVX2 mask for maskload/maskstore (valid clamped to [0, 8]).
__attribute__((target("avx2"))) inline __m256i Avx2LaneMask(int valid) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Stores lanes [0, valid) of v at p (nothing when valid <= 0): a plain store when all 8 are
// valid, a masked one only for a tail. Masked stores are microcoded on AMD's AVX2 CPUs, many
// times the cost of a plain store, so hot loops store through this.
__attribute__((target("avx2"))) inline void Avx2StoreFirst(float* p, int valid, __m256 v) {
  if (valid >= 8) {
    _mm256_storeu_ps(p, v);
  } else if (valid > 0) {
    _mm256_maskstore_ps(p, Avx2LaneMask(valid), v);
  }
}
#endif

// exp(x) in float to ~2 ulp (Cody-Waite reduction and a degree-6 polynomial, as Cephes'
// expf). Returns exactly 0 for x below -87.3 (including -inf) and saturates above 88.7.
inline float ExpApprox(float x) {
  // Branch-free (selects only), so loops calling it vectorize.
  const float keep = x >= -87.33654f ? 1.0f : 0.0f;
  x = x < -87.33654f ? -87.33654f : x;
  x = x > 88.72283f ? 88.72283f : x;
  // Round to nearest with the 1.5 * 2^23 trick (no libm call).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale * keep;
}

}  // namespace tnmt::kernels::cpu
