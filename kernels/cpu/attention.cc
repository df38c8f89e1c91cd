// Attention kernel; see attention.h. Memory stays linear in the key length: scores are kept
// for a few query rows at a time, never for a whole [q_len, k_len] matrix. A fully masked row
// (cannot happen with valid inputs) yields zeros.
//
// Implementations with the same semantics:
// - Blocked (AVX-512, and AVX2 + FMA): query rows are processed in blocks of up to kBlockRows
//   rows that start at the same key row (the beams of one sentence, which share the
//   cross-attention K/V and the self-attention cache slots of their common prefix; or the
//   queries of one group). Keys are walked once per block and head, so a K/V row that several
//   rows of the block read is fetched from memory once and then hit in L1. Scores are computed
//   16 keys at a time (8 for a row's last chunk when at most 8 are left: decoder steps at the
//   first positions) with one transposing reduction (no horizontal sum per key and head), the
//   softmax runs over vectors of keys, and P·V accumulates several rows x columns in
//   registers. Each row's arithmetic does not depend on the other rows of its block, so
//   results do not depend on batching. The AVX2 kernels hold each 16-lane vector of the
//   AVX-512 ones as two 8-lane halves and perform the same operations per lane, with the same
//   reduction trees (sums and maxima over the 16 lanes), so the two give bit-identical results.
// - Portable (other CPUs, and tests): one query row at a time, keys outer and heads inner.
#include "kernels/cpu/attention.h"

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vec16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>



namespace tnmt::kernels::cpu {

namespace {

// The K/V group query group b reads, and the valid keys of K/V group g (AttentionArgs).
inline int KvGroup(const AttentionArgs& a, int64_t b) {
  return a.kv_index != nullptr ? a.kv_index[b] : static_cast<int>(b);
}
inline int ValidKeys(const AttentionArgs& a, int g) {
  return a.k_valid != nullptr ? a.k_valid[g] : a.k_len;
}
// Keys query position i of a query group reading K/V group g may see: the group's valid keys,
// causally limited (not clamped to k_len).
inline int VisibleKeys(const AttentionArgs& a, int g, int i) {
  const int valid = ValidKeys(a, g);
  return a.causal_offset >= 0 && i + a.causal_offset + 1 < valid ? i + a.causal_offset + 1 : valid;
}
// Where key j of K/V group g starts in k and v: through the group's slot table when there is one.
inline int64_t KeyOffset(const AttentionArgs& a, int g, int j, int64_t kv_group_stride, int64_t ld_kv) {
  const int64_t stored = a.k_groups != nullptr ? a.k_groups[g * a.k_groups_stride + j] : g;
  return stored * kv_group_stride + j * ld_kv;
}

// Query groups [b_begin, b_end) of MultiHeadAttention, portable code.
TNMT_VECTORIZE void AttentionGroupsPortable(float* out, int64_t ld_out, const float* q,
                                            int64_t ld_q, const float* k, const float* v,
                                            int64_t ld_kv, int64_t kv_group_stride,
                                            const AttentionArgs& a, int b_begin, int b_end,
                                            float* scratch) {
  const int dh = a.d_head;
  for (int b = b_begin; b < b_end; ++b) {
    const int g = KvGroup(a, b);
    auto key_row = [&](int j) { return KeyOffset(a, g, j, kv_group_stride, ld_kv); };
    for (int i = 0; i < a.q_len; ++i) {
      const int limit = VisibleKeys(a, g, i);
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

#if defined(__x86_64__)

constexpr int kBlockRows = 8;  // query rows per block (beams of a sentence, up to beam 8)

namespace avx2 {
TNMT_AVX2_TARGET inline __m256 Reduce8(const __m256* v);  // below
}  // namespace avx2

namespace avx512 {

using vec16::avx512::TailMask;

// Lane t of the result = sum of the 16 lanes of a[t]: a transposing reduction tree
// (15 adds, 30 shuffles, one permute for 16 sums).
TNMT_AVX512_TARGET inline __m512 Reduce16(const __m512* a) {
  __m512 x[8], y[4], z[2];
  // 256-bit halves: x[i] = [a_i lo+hi (8 floats) | a_{i+8} lo+hi].
  for (int i = 0; i < 8; ++i) {
    x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[i], a[i + 8], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a[i], a[i + 8], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // 128-bit lanes: y[i] = [a_i | a_{i+8} | a_{i+4} | a_{i+12}], 4 partial sums each.
  for (int i = 0; i < 4; ++i) {
    y[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[i], x[i + 4], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(x[i], x[i + 4], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  for (int i = 0; i < 2; ++i) {
    z[i] = _mm512_add_ps(_mm512_unpacklo_ps(y[i], y[i + 2]), _mm512_unpackhi_ps(y[i], y[i + 2]));
  }
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(3, 2, 3, 2)));
  // Lane 4L+s of r holds a[{0,8,4,12}[L] + {0,2,1,3}[s]]; put a[t] at lane t.
  const __m512i perm = _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15);
  return _mm512_permutexvar_ps(perm, r);
}

// 16 floats from p, or only the lanes of `tail` when `last` (never reading past them).
TNMT_AVX512_TARGET inline __m512 LoadChunk(const float* p, bool last, __mmask16 tail) {
  return last ? _mm512_maskz_loadu_ps(tail, p) : _mm512_loadu_ps(p);
}

// s[t] = scale * (q · k[off[t]]) for 16 keys; q and k already point at the head's columns.
// Keys past a row's limit have off[] repeating its last key (see offsets below): their scores
// are computed from a valid row and ignored by the softmax.
// kChunks > 0: dh <= 64 with kChunks = ceil(dh / 16) (q in registers, one key at a time);
// 0: any dh (chunks outer).
// kKeys = 8 (kChunks > 0 only): the first 8 keys (a row's last chunk when at most 8 are left),
// each score bit for bit what kKeys = 16 gives it: the same products and chunk sums per lane,
// then Reduce16's tree on 256-bit halves (its first step, lanes l + l+8, then avx2::Reduce8,
// the rest of the same tree).
template <int kChunks, int kKeys = 16>
TNMT_AVX512_TARGET void Scores16(float* s, const float* q, const float* k, const int64_t* off,
                                 int dh, float scale) {
  static_assert(kKeys == 16 || (kKeys == 8 && kChunks > 0));
  __m512 acc[16];
  const __mmask16 tail = dh % 16 != 0 ? TailMask(dh % 16) : static_cast<__mmask16>(0xFFFF);
  if constexpr (kChunks > 0) {
    __m512 qc[kChunks];
#pragma GCC unroll 4
    for (int c = 0; c < kChunks; ++c) {
      qc[c] = _mm512_maskz_loadu_ps(c == kChunks - 1 ? tail : static_cast<__mmask16>(0xFFFF),
                                    q + 16 * c);
    }
#pragma GCC unroll 16
    for (int t = 0; t < kKeys; ++t) {
      const float* kt = k + off[t];
      // The last chunk is loaded masked (never past the row; lanes past dh are 0 in q and k).
      __m512 x = _mm512_mul_ps(qc[0], LoadChunk(kt, kChunks == 1, tail));
#pragma GCC unroll 4
      for (int c = 1; c < kChunks; ++c) {
        x = _mm512_fmadd_ps(qc[c], LoadChunk(kt + 16 * c, c == kChunks - 1, tail), x);
      }
      acc[t] = x;
    }
  } else {
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
    const int full = dh / 16;
    for (int c = 0; c < full; ++c) {
      const __m512 qc = _mm512_loadu_ps(q + 16 * c);
#pragma GCC unroll 16
      for (int t = 0; t < 16; ++t) {
        acc[t] = _mm512_fmadd_ps(qc, _mm512_loadu_ps(k + off[t] + 16 * c), acc[t]);
      }
    }
    if (dh % 16 != 0) {
      const __m512 qc = _mm512_maskz_loadu_ps(tail, q + 16 * full);
#pragma GCC unroll 16
      for (int t = 0; t < 16; ++t) {
        acc[t] = _mm512_fmadd_ps(qc, _mm512_maskz_loadu_ps(tail, k + off[t] + 16 * full), acc[t]);
      }
    }
  }
  if constexpr (kKeys == 16) {
    _mm512_storeu_ps(s, _mm512_mul_ps(Reduce16(acc), _mm512_set1_ps(scale)));
  } else {
    __m256 p1[8];
    for (int t = 0; t < 8; ++t) {
      p1[t] = _mm256_add_ps(_mm512_castps512_ps256(acc[t]), _mm512_extractf32x8_ps(acc[t], 1));
    }
    _mm256_storeu_ps(s, _mm256_mul_ps(avx2::Reduce8(p1), _mm256_set1_ps(scale)));
  }
}

using Scores16Fn = void (*)(float*, const float*, const float*, const int64_t*, int, float);

// The kernel for `keys` keys (16, or 8: nullptr for head widths above 64, which use 16).
Scores16Fn PickScores(int dh, int keys) {
  const bool eight = keys == 8;
  switch ((dh + 15) / 16) {
    case 1: return eight ? &Scores16<1, 8> : &Scores16<1>;
    case 2: return eight ? &Scores16<2, 8> : &Scores16<2>;
    case 3: return eight ? &Scores16<3, 8> : &Scores16<3>;
    case 4: return eight ? &Scores16<4, 8> : &Scores16<4>;
    default: return eight ? nullptr : &Scores16<0>;
  }
}

// In place: s[0, n) = exp(s - max(s)); returns 1 / sum.
TNMT_AVX512_TARGET float SoftmaxNumerators(float* s, int n) {
  float sum;
  vec16::avx512::MaxAndExpSum(s, n, s, &sum);
  return 1.0f / sum;
}

// Rows r < R: out[r][chunk c] = inv[r] * sum over j < limit[r] of p[r][j] * v[off[r][j]]
// (columns 16c.., mask[c]). Keys below jmin are valid for every row.
template <int R, int C>
TNMT_AVX512_TARGET void ProbsTimesV(float* const* out, const float* const* p,
                                    const int64_t* const* off, const int* limit, int jmin,
                                    int jmax, const float* v, const __mmask16* mask,
                                    const float* inv) {
  __m512 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int j = 0; j < jmin; ++j) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 pr = _mm512_set1_ps(p[r][j]);
      const float* vr = v + off[r][j];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        acc[r][c] = _mm512_fmadd_ps(pr, _mm512_maskz_loadu_ps(mask[c], vr + 16 * c), acc[r][c]);
      }
    }
  }
  for (int j = jmin; j < jmax; ++j) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if (j >= limit[r]) continue;
      const __m512 pr = _mm512_set1_ps(p[r][j]);
      const float* vr = v + off[r][j];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        acc[r][c] = _mm512_fmadd_ps(pr, _mm512_maskz_loadu_ps(mask[c], vr + 16 * c), acc[r][c]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m512 s = _mm512_set1_ps(inv[r]);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      _mm512_mask_storeu_ps(out[r] + 16 * c, mask[c], _mm512_mul_ps(acc[r][c], s));
    }
  }
}

using ProbsTimesVFn = void (*)(float* const*, const float* const*, const int64_t* const*,
                               const int*, int, int, const float*, const __mmask16*, const float*);

template <int R>
ProbsTimesVFn PickPv(int c) {
  switch (c) {
    case 1: return &ProbsTimesV<R, 1>;
    case 2: return &ProbsTimesV<R, 2>;
    case 3: return &ProbsTimesV<R, 3>;
    default: return &ProbsTimesV<R, 4>;
  }
}

ProbsTimesVFn PickPv(int r, int c) {
  switch (r) {
    case 1: return PickPv<1>(c);
    case 2: return PickPv<2>(c);
    case 3: return PickPv<3>(c);
    default: return PickPv<4>(c);
  }
}

// What AttentionGroupsBlocked needs of a vector ISA.
struct Isa {
  using Mask = __mmask16;  // lanes of a 16-float chunk
  static constexpr int kPvRows = 4;    // rows accumulated together in P·V (4 x 4 zmm)
  // 16-column chunks per P·V pass of `rows` rows (64 columns)
  static int PvChunks(int /*rows*/) { return 4; }
  static Mask Full() { return static_cast<Mask>(0xFFFF); }
  static Mask Tail(int n) { return TailMask(n); }
  static Scores16Fn Scores(int dh) { return PickScores(dh, 16); }
  static Scores16Fn Scores8(int dh) { return PickScores(dh, 8); }
  static float Softmax(float* s, int n) { return SoftmaxNumerators(s, n); }
  static ProbsTimesVFn Pv(int r, int c) { return PickPv(r, c); }
};

}  // namespace avx512

namespace avx2 {

// The AVX-512 kernels above on two 8-lane halves (lo = lanes 0-7, hi = lanes 8-15 of each
// 16-float chunk): the same operation per lane, the same reduction trees.

// Lanes of a 16-float chunk: the first n (0 to 16).
using Mask = int;
using vec16::avx2::HiMask;
using vec16::avx2::LoMask;
using vec16::avx2::Rounded;

// Lane t of the result = the sum of the 8 lanes of v[t], each v[t] being lanes l + lanes l+8
// of a 16-lane vector (avx512::Reduce16's first step): the rest of Reduce16's tree,
// (v0 + v4) + (v2 + v6) + ((v1 + v5) + (v3 + v7)) per vector.
TNMT_AVX2_TARGET inline __m256 Reduce8(const __m256* v) {
  __m256 t[4], u[2];
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[i], v[i + 4], 0x20),
                         _mm256_permute2f128_ps(v[i], v[i + 4], 0x31));
  }
  for (int i = 0; i < 2; ++i) {
    u[i] = _mm256_add_ps(_mm256_unpacklo_ps(t[i], t[i + 2]), _mm256_unpackhi_ps(t[i], t[i + 2]));
  }
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 2, 3, 2)));
  // Lane 4L+s of r holds v[4L + {0,2,1,3}[s]].
  return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 2, 1, 3, 4, 6, 5, 7));
}

// avx512::Scores16: s[t] = scale * (q · k[off[t]]) for kKeys keys (16, or 8 as there).
template <int kChunks, int kKeys = 16>
TNMT_AVX2_TARGET void Scores16(float* s, const float* q, const float* k, const int64_t* off,
                               int dh, float scale) {
  static_assert(kKeys == 16 || (kKeys == 8 && kChunks > 0));
  __m256 p1[16];  // per key: the products' lanes l + lanes l+8
  const Mask tail = dh % 16 != 0 ? dh % 16 : 16;
  const __m256i tlo = LoMask(tail), thi = HiMask(tail);
  if constexpr (kChunks > 0) {
    __m256 qlo[kChunks], qhi[kChunks];
#pragma GCC unroll 4
    for (int c = 0; c < kChunks; ++c) {
      const __m256i mlo = c == kChunks - 1 ? tlo : _mm256_set1_epi32(-1);
      const __m256i mhi = c == kChunks - 1 ? thi : _mm256_set1_epi32(-1);
      qlo[c] = _mm256_maskload_ps(q + 16 * c, mlo);
      qhi[c] = _mm256_maskload_ps(q + 16 * c + 8, mhi);
    }
#pragma GCC unroll 16
    for (int t = 0; t < kKeys; ++t) {
      const float* kt = k + off[t];
      __m256 xlo, xhi;
      if constexpr (kChunks == 1) {
        xlo = _mm256_mul_ps(qlo[0], _mm256_maskload_ps(kt, tlo));
        xhi = _mm256_mul_ps(qhi[0], _mm256_maskload_ps(kt + 8, thi));
      } else {
        xlo = _mm256_mul_ps(qlo[0], _mm256_loadu_ps(kt));
        xhi = _mm256_mul_ps(qhi[0], _mm256_loadu_ps(kt + 8));
#pragma GCC unroll 4
        for (int c = 1; c < kChunks - 1; ++c) {
          xlo = _mm256_fmadd_ps(qlo[c], _mm256_loadu_ps(kt + 16 * c), xlo);
          xhi = _mm256_fmadd_ps(qhi[c], _mm256_loadu_ps(kt + 16 * c + 8), xhi);
        }
        constexpr int c = kChunks - 1;
        xlo = _mm256_fmadd_ps(qlo[c], _mm256_maskload_ps(kt + 16 * c, tlo), xlo);
        xhi = _mm256_fmadd_ps(qhi[c], _mm256_maskload_ps(kt + 16 * c + 8, thi), xhi);
      }
      p1[t] = _mm256_add_ps(Rounded(xlo), Rounded(xhi));
    }
  } else {
    __m256 alo[16], ahi[16];
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) alo[t] = ahi[t] = _mm256_setzero_ps();
    const int full = dh / 16;
    for (int c = 0; c < full; ++c) {
      const __m256 qlo = _mm256_loadu_ps(q + 16 * c), qhi = _mm256_loadu_ps(q + 16 * c + 8);
#pragma GCC unroll 16
      for (int t = 0; t < 16; ++t) {
        alo[t] = _mm256_fmadd_ps(qlo, _mm256_loadu_ps(k + off[t] + 16 * c), alo[t]);
        ahi[t] = _mm256_fmadd_ps(qhi, _mm256_loadu_ps(k + off[t] + 16 * c + 8), ahi[t]);
      }
    }
    if (dh % 16 != 0) {
      const __m256 qlo = _mm256_maskload_ps(q + 16 * full, tlo);
      const __m256 qhi = _mm256_maskload_ps(q + 16 * full + 8, thi);
#pragma GCC unroll 16
      for (int t = 0; t < 16; ++t) {
        alo[t] = _mm256_fmadd_ps(qlo, _mm256_maskload_ps(k + off[t] + 16 * full, tlo), alo[t]);
        ahi[t] = _mm256_fmadd_ps(qhi, _mm256_maskload_ps(k + off[t] + 16 * full + 8, thi), ahi[t]);
      }
    }
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) p1[t] = _mm256_add_ps(alo[t], ahi[t]);
  }
  const __m256 vscale = _mm256_set1_ps(scale);
  _mm256_storeu_ps(s, _mm256_mul_ps(Reduce8(p1), vscale));
  if constexpr (kKeys == 16) _mm256_storeu_ps(s + 8, _mm256_mul_ps(Reduce8(p1 + 8), vscale));
}

using Scores16Fn = void (*)(float*, const float*, const float*, const int64_t*, int, float);

// The kernel for `keys` keys (16, or 8: nullptr for head widths above 64, which use 16).
Scores16Fn PickScores(int dh, int keys) {
  const bool eight = keys == 8;
  switch ((dh + 15) / 16) {
    case 1: return eight ? &Scores16<1, 8> : &Scores16<1>;
    case 2: return eight ? &Scores16<2, 8> : &Scores16<2>;
    case 3: return eight ? &Scores16<3, 8> : &Scores16<3>;
    case 4: return eight ? &Scores16<4, 8> : &Scores16<4>;
    default: return eight ? nullptr : &Scores16<0>;
  }
}

// avx512::SoftmaxNumerators: in place s[0, n) = exp(s - max(s)); returns 1 / sum.
TNMT_AVX2_TARGET float SoftmaxNumerators(float* s, int n) {
  float sum;
  vec16::avx2::MaxAndExpSum(s, n, s, &sum);
  return 1.0f / sum;
}

// avx512::ProbsTimesV with C 16-column chunks of R rows (2C ymm accumulators per row).
template <int R, int C>
TNMT_AVX2_TARGET void ProbsTimesV(float* const* out, const float* const* p,
                                  const int64_t* const* off, const int* limit, int jmin, int jmax,
                                  const float* v, const Mask* mask, const float* inv) {
  __m256 acc[R][2 * C];
  __m256i lanes[2 * C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
    lanes[2 * c] = LoMask(mask[c]);
    lanes[2 * c + 1] = HiMask(mask[c]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < 2 * C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  for (int j = 0; j < jmin; ++j) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 pr = _mm256_set1_ps(p[r][j]);
      const float* vr = v + off[r][j];
#pragma GCC unroll 8
      for (int c = 0; c < 2 * C; ++c) {
        acc[r][c] = _mm256_fmadd_ps(pr, _mm256_maskload_ps(vr + 8 * c, lanes[c]), acc[r][c]);
      }
    }
  }
  for (int j = jmin; j < jmax; ++j) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if (j >= limit[r]) continue;
      const __m256 pr = _mm256_set1_ps(p[r][j]);
      const float* vr = v + off[r][j];
#pragma GCC unroll 8
      for (int c = 0; c < 2 * C; ++c) {
        acc[r][c] = _mm256_fmadd_ps(pr, _mm256_maskload_ps(vr + 8 * c, lanes[c]), acc[r][c]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m256 sc = _mm256_set1_ps(inv[r]);
#pragma GCC unroll 8
    for (int c = 0; c < 2 * C; ++c) {
      Avx2StoreFirst(out[r] + 8 * c, mask[c / 2] - 8 * (c % 2), _mm256_mul_ps(acc[r][c], sc));
    }
  }
}

using ProbsTimesVFn = void (*)(float* const*, const float* const*, const int64_t* const*,
                               const int*, int, int, const float*, const Mask*, const float*);

ProbsTimesVFn PickPv(int r, int c) {
  if (r == 1) {
    switch (c) {
      case 1: return &ProbsTimesV<1, 1>;
      case 2: return &ProbsTimesV<1, 2>;
      case 3: return &ProbsTimesV<1, 3>;
      default: return &ProbsTimesV<1, 4>;
    }
  }
  return c == 1 ? &ProbsTimesV<2, 1> : &ProbsTimesV<2, 2>;
}

struct Isa {
  using Mask = avx2::Mask;
  static constexpr int kPvRows = 2;    // rows accumulated together in P·V
  // 16-column chunks per P·V pass: 8 ymm accumulators (one row x 64 columns, or two x 32)
  static int PvChunks(int rows) { return rows == 1 ? 4 : 2; }
  static Mask Full() { return 16; }
  static Mask Tail(int n) { return n; }
  static Scores16Fn Scores(int dh) { return PickScores(dh, 16); }
  static Scores16Fn Scores8(int dh) { return PickScores(dh, 8); }
  static float Softmax(float* s, int n) { return SoftmaxNumerators(s, n); }
  static ProbsTimesVFn Pv(int r, int c) { return PickPv(r, c); }
};

}  // namespace avx2

// Per-thread buffers of the blocked path, reused across calls.
template <class Isa>
struct BlockedScratch {
  std::vector<float> scores;  // [kBlockRows, num_heads, k_pad]
  // [kBlockRows, k_pad]: element offset of key j in k and v; past the row's limit, the
  // offset of its last key (so that score chunks are always 16 keys).
  std::vector<int64_t> offsets;
  std::vector<float> inv;     // [kBlockRows, num_heads]
  std::vector<typename Isa::Mask> masks;  // [chunks]: column mask of each 16-column chunk of a head
};

// Query groups [b_begin, b_end) of MultiHeadAttention on a vector ISA (avx512::Isa or
// avx2::Isa). Scalar bookkeeping only; the arithmetic is in the ISA's kernels.
template <class Isa>
void AttentionGroupsBlocked(float* out, int64_t ld_out, const float* q, int64_t ld_q,
                            const float* k, const float* v, int64_t ld_kv, int64_t kv_group_stride,
                            const AttentionArgs& a, int b_begin, int b_end,
                            BlockedScratch<Isa>* scratch) {
  constexpr int kPvRows = Isa::kPvRows;
  const int dh = a.d_head, heads = a.num_heads;
  const int k_pad = (std::max(a.k_len, 1) + 15) / 16 * 16;
  scratch->scores.resize(static_cast<size_t>(kBlockRows) * heads * k_pad);
  scratch->offsets.resize(static_cast<size_t>(kBlockRows) * k_pad);
  scratch->inv.resize(static_cast<size_t>(kBlockRows) * heads);
  auto key_offset = [&](int g, int j) { return KeyOffset(a, g, j, kv_group_stride, ld_kv); };
  // Keys query row `qrow` (of batch * q_len) may see, within [0, k_len].
  auto visible_keys = [&](int64_t qrow) {
    return std::clamp(VisibleKeys(a, KvGroup(a, qrow / a.q_len), static_cast<int>(qrow % a.q_len)), 0, a.k_len);
  };
  // Rows whose first key is the same K/V row form a block (-1: no keys).
  auto first_key = [&](int b) -> int64_t {
    const int g = KvGroup(a, b);
    return ValidKeys(a, g) > 0 ? key_offset(g, 0) : -1;
  };
  // Column chunks of one head for P·V: 16 columns each, the last one masked.
  const int chunks = (dh + 15) / 16;
  auto& masks = scratch->masks;
  masks.assign(chunks, Isa::Full());
  if (dh % 16 != 0) masks[chunks - 1] = Isa::Tail(dh % 16);

  const int64_t row_end = static_cast<int64_t>(b_end) * a.q_len;
  int64_t row = static_cast<int64_t>(b_begin) * a.q_len;
  while (row < row_end) {
    // The block: rows [row, row + n).
    const int b0 = static_cast<int>(row / a.q_len);
    const int64_t key0 = first_key(b0);
    int n = 1;
    while (n < kBlockRows && row + n < row_end) {
      const int bn = static_cast<int>((row + n) / a.q_len);
      if (bn != b0 && first_key(bn) != key0) break;
      ++n;
    }
    const float* qr[kBlockRows];
    float* orow[kBlockRows];
    int limit[kBlockRows];
    int jmax = 0;
    for (int r = 0; r < n; ++r) {
      const int64_t qrow = row + r;
      const int g = KvGroup(a, qrow / a.q_len);
      const int lim = visible_keys(qrow);
      limit[r] = lim;
      jmax = std::max(jmax, lim);
      qr[r] = q + qrow * ld_q;
      orow[r] = out + qrow * ld_out;
      int64_t* off = scratch->offsets.data() + static_cast<int64_t>(r) * k_pad;
      for (int j = 0; j < lim; ++j) off[j] = key_offset(g, j);
      for (int j = lim; j < (lim + 15) / 16 * 16; ++j) off[j] = off[lim - 1];
      if (lim == 0) std::memset(orow[r], 0, sizeof(float) * heads * dh);
    }
    // The next block's K/V rows into L2 while this block computes, when they are another
    // sentence's (decoder steps: each block reads K/V rows no other block does, from L3 or
    // memory, and the kernels would otherwise stall on each of them).
    if (row + n < row_end && first_key(static_cast<int>((row + n) / a.q_len)) != key0) {
      const int ng = KvGroup(a, (row + n) / a.q_len);
      const int nlim = visible_keys(row + n);
      const int width = heads * dh;
      for (int j = 0; j < nlim; ++j) {
        const int64_t o = key_offset(ng, j);
        for (int c = 0; c < width; c += 16) {
          _mm_prefetch(reinterpret_cast<const char*>(k + o + c), _MM_HINT_T1);
          _mm_prefetch(reinterpret_cast<const char*>(v + o + c), _MM_HINT_T1);
        }
      }
    }
    auto scores = [&](int r, int h) {
      return scratch->scores.data() + (static_cast<int64_t>(r) * heads + h) * k_pad;
    };
    auto offsets = [&](int r) { return scratch->offsets.data() + static_cast<int64_t>(r) * k_pad; };
    // Scores: per 16 keys and head, every row of the block (the keys' head slices stay in L1);
    // a row's last chunk with at most 8 keys left takes the 8-key kernel (the same bits per key).
    const auto scores16 = Isa::Scores(dh);
    const auto scores8 = Isa::Scores8(dh);
    for (int j0 = 0; j0 < jmax; j0 += 16) {
      for (int h = 0; h < heads; ++h) {
        for (int r = 0; r < n; ++r) {
          if (j0 >= limit[r]) continue;
          const auto kernel = scores8 != nullptr && limit[r] - j0 <= 8 ? scores8 : scores16;
          kernel(scores(r, h) + j0, qr[r] + h * dh, k + h * dh, offsets(r) + j0, dh, a.scale);
        }
      }
    }
    // Softmax numerators; the 1/sum is applied to the P·V result.
    for (int r = 0; r < n; ++r) {
      if (limit[r] == 0) continue;
      for (int h = 0; h < heads; ++h) {
        scratch->inv[static_cast<size_t>(r) * heads + h] = Isa::Softmax(scores(r, h), limit[r]);
      }
    }
    // P·V: up to kPvRows rows (with keys) x Isa::PvChunks column chunks at a time.
    int active[kBlockRows], na = 0;
    for (int r = 0; r < n; ++r) {
      if (limit[r] > 0) active[na++] = r;
    }
    for (int r0 = 0; r0 < na; r0 += kPvRows) {
      const int rn = std::min(kPvRows, na - r0);
      int lim[kPvRows];
      const int64_t* offs[kPvRows];
      int jmin = a.k_len, jhi = 0;
      for (int x = 0; x < rn; ++x) {
        const int r = active[r0 + x];
        lim[x] = limit[r];
        offs[x] = offsets(r);
        jmin = std::min(jmin, lim[x]);
        jhi = std::max(jhi, lim[x]);
      }
      for (int h = 0; h < heads; ++h) {
        const float* probs[kPvRows];
        float inv[kPvRows];
        for (int x = 0; x < rn; ++x) {
          probs[x] = scores(active[r0 + x], h);
          inv[x] = scratch->inv[static_cast<size_t>(active[r0 + x]) * heads + h];
        }
        const int pv_chunks = Isa::PvChunks(rn);
        for (int c0 = 0; c0 < chunks; c0 += pv_chunks) {
          const int cn = std::min(pv_chunks, chunks - c0);
          float* dst[kPvRows];
          for (int x = 0; x < rn; ++x) dst[x] = orow[active[r0 + x]] + h * dh + 16 * c0;
          Isa::Pv(rn, cn)(dst, probs, offs, lim, jmin, jhi, v + h * dh + 16 * c0,
                         masks.data() + c0, inv);
        }
      }
    }
    row += n;
  }
}

#endif  // __x86_64__

// Calls fn(b_begin, b_end) on ranges of query groups, one range per compute thread, split by
// work (query rows times the keys they may see, plus a per-row constant) rather than by count:
// a decoder step's sentences differ in length, and equal counts leave one thread waiting for
// the other. Each group is processed by one thread with the same arithmetic as ever.
void ForGroupsByWork(const AttentionArgs& a, const std::function<void(int, int)>& fn) {
  const int parts = static_cast<int>(std::min<int64_t>(ComputeThreads(), a.batch));
  if (parts <= 1) {
    if (a.batch > 0) fn(0, a.batch);
    return;
  }
  thread_local std::vector<int64_t> prefix;  // prefix[b]: the work of groups [0, b)
  thread_local std::vector<int> bounds;
  prefix.resize(static_cast<size_t>(a.batch) + 1);
  prefix[0] = 0;
  for (int b = 0; b < a.batch; ++b) {
    int keys = ValidKeys(a, KvGroup(a, b));
    if (a.causal_offset >= 0) keys = std::min(keys, a.q_len + a.causal_offset);
    prefix[b + 1] = prefix[b] + static_cast<int64_t>(a.q_len) * (std::max(keys, 0) + 4);
  }
  bounds.assign(static_cast<size_t>(parts) + 1, a.batch);
  bounds[0] = 0;
  for (int c = 1; c < parts; ++c) {
    const int64_t target = prefix[a.batch] * c / parts;
    const int at = static_cast<int>(std::lower_bound(prefix.begin(), prefix.end(), target) - prefix.begin());
    bounds[c] = std::clamp(at, bounds[c - 1], a.batch);
  }
  const int* cut = bounds.data();  // the caller's buffer (workers must not name a thread_local)
  ParallelFor(parts, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      if (cut[c] < cut[c + 1]) fn(cut[c], cut[c + 1]);
    }
  });
}

}  // namespace

void MultiHeadAttention(float* out, int64_t ld_out, const float* q, int64_t ld_q, const float* k,
                        const float* v, int64_t ld_kv, int64_t kv_group_stride,
                        const AttentionArgs& a) {
#if defined(__x86_64__)
  if (UseAvx512()) {
    ForGroupsByWork(a, [&](int begin, int end) {
      thread_local BlockedScratch<avx512::Isa> scratch;  // per thread, reused: no allocation per call
      AttentionGroupsBlocked(out, ld_out, q, ld_q, k, v, ld_kv, kv_group_stride, a, begin, end, &scratch);
    });
    return;
  }
  if (UseAvx2()) {
    ForGroupsByWork(a, [&](int begin, int end) {
      thread_local BlockedScratch<avx2::Isa> scratch;
      AttentionGroupsBlocked(out, ld_out, q, ld_q, k, v, ld_kv, kv_group_stride, a, begin, end, &scratch);
    });
    return;
  }
#endif
  ForGroupsByWork(a, [&](int begin, int end) {
    // Per thread, reused across calls: no allocation on the decode path.
    thread_local std::vector<float> scores;
    scores.resize(static_cast<size_t>(a.num_heads) * (a.k_len > 0 ? a.k_len : 1));
    AttentionGroupsPortable(out, ld_out, q, ld_q, k, v, ld_kv, kv_group_stride, a, begin, end,
                            scores.data());
  });
}

void AttentionArgmax(int32_t* out, const float* q, int64_t ld_q, const float* k, int64_t ld_kv,
                     int64_t kv_group_stride, const AttentionArgs& a) {
  const int dh = a.d_head;
  ParallelFor(a.batch, [&](int64_t begin, int64_t end) {
    std::vector<double> scores, mean;
    for (int64_t b = begin; b < end; ++b) {
      const int g = KvGroup(a, b);
      for (int i = 0; i < a.q_len; ++i) {
        const int limit = VisibleKeys(a, g, i);
        const int64_t row = b * a.q_len + i;
        if (limit <= 0) {
          out[row] = -1;
          continue;
        }
        const float* qr = q + row * ld_q;
        scores.assign(limit, 0.0);
        mean.assign(limit, 0.0);
        for (int h = 0; h < a.num_heads; ++h) {
          double mx = -INFINITY;
          for (int j = 0; j < limit; ++j) {
            const float* kh = k + KeyOffset(a, g, j, kv_group_stride, ld_kv) + h * dh;
            double s = 0.0;
            for (int c = 0; c < dh; ++c) s += static_cast<double>(qr[h * dh + c]) * kh[c];
            scores[j] = s * a.scale;
            mx = std::max(mx, scores[j]);
          }
          double sum = 0.0;
          for (int j = 0; j < limit; ++j) sum += (scores[j] = std::exp(scores[j] - mx));
          for (int j = 0; j < limit; ++j) mean[j] += scores[j] / sum;
        }
        int best = 0;
        for (int j = 1; j < limit; ++j) {
          if (mean[j] > mean[best]) best = j;
        }
        out[row] = best;
      }
    }
  });
}

}  // namespace tnmt::kernels::cpu
