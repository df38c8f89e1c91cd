// A 16 x 16 transpose of 32-bit lanes in AVX-512 registers, shared by the packed GEMMs'
// packing routines (gemm_packed.cc, gemm_bf16.cc). It only moves bits, so it transposes
// bfloat16 pairs held as 32-bit lanes as well as floats.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

namespace tnmt::kernels::cpu {

// c[q] lane i = r[i] lane q (16 x 16 transpose, 64 shuffles).
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))
inline void Transpose16(const __m512* r, __m512* c) {
  __m512 t[16], u[16];
  for (int j = 0; j < 8; ++j) {
    t[2 * j] = _mm512_unpacklo_ps(r[2 * j], r[2 * j + 1]);
    t[2 * j + 1] = _mm512_unpackhi_ps(r[2 * j], r[2 * j + 1]);
  }
  // u[4g + s], 128-bit lane L: rows 4g..4g+3 at column 4L + s.
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // Column 4L + s = lane L of u[s], u[4 + s], u[8 + s], u[12 + s].
  for (int s = 0; s < 4; ++s) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[s], u[4 + s], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 v1 = _mm512_shuffle_f32x4(u[s], u[4 + s], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + s], u[12 + s], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + s], u[12 + s], _MM_SHUFFLE(3, 2, 3, 2));
    c[s] = _mm512_shuffle_f32x4(v0, v2, _MM_SHUFFLE(2, 0, 2, 0));
    c[4 + s] = _mm512_shuffle_f32x4(v0, v2, _MM_SHUFFLE(3, 1, 3, 1));
    c[8 + s] = _mm512_shuffle_f32x4(v1, v3, _MM_SHUFFLE(2, 0, 2, 0));
    c[12 + s] = _mm512_shuffle_f32x4(v1, v3, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

}  // namespace tnmt::kernels::cpu

#endif  // defined(__x86_64__)
