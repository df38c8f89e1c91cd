// GEMM with a prepacked weight operand; see gemm.h (PackedMatrix, GemmPacked).
//
// cblas_sgemm re-packs both operands on every call; for C = X · W^T OpenBLAS treats W as its
// "A" and copies the whole weight matrix each time (sgemm_incopy: ~15% of a decode step). Here
// W is packed once, at model load, into panels of 32 output columns stored [k, 32] row by row,
// and only the activations (m x k, small next to W for decode shapes) are packed per call.
//
// AVX-512 microkernel: a tile of up to 14 rows x 32 columns lives in 28 zmm accumulators; per
// k step it loads the panel's 32 floats (2 zmm), broadcasts each row's activation once and
// issues 2 FMAs per row. Rows are split into tiles of equal height (<= 14), so m = 128 runs
// as 13/12-row tiles rather than 9 x 14 + a 2-row remainder. Loop nest per thread:
// k blocks of kKc (the activation block stays in L2), then the thread's panels (the panel
// block stays in L1/L2), then the row tiles. Threads take contiguous ranges of panels
// (ParallelFor), so each weight is read by one thread only and per-element arithmetic does not
// depend on the thread count or on m.
//
// AVX2 microkernel (CPUs without AVX-512): a tile of up to 6 rows x 16 columns (half a panel)
// in 12 ymm accumulators, the two halves one after the other. Each output element is the same
// chain of FMAs as in the AVX-512 kernel (init, then a[i,p] * b[p,j] fused-added in k order,
// stored and reloaded between k blocks), so the two paths give bit-identical results.
//
// Zero activations: packing records, per group of rows of a tile (the AVX-512 path's tiles
// split into groups of at most kSparseGroupRows = 4 rows, the AVX2 path's into groups of at
// most 3), the k steps at which some row of the group is not zero. Where every group of a tile
// has at most 3/4 of a k block's steps listed, each group runs a sparse kernel (Kernel<MR,
// true>, KernelAvx2Sparse), which walks its list (the packed activations and the panel's rows
// at each listed step) instead of every step. A ReLU's output, the input of a feed-forward's
// second product, is mostly zeros (97% of a trained model's hidden units per token; all zero
// in 92% of the k steps of 4 rows, 88% of 7 rows, 80% of 14 rows). A skipped step adds ±0 to
// each accumulator: no value changes (only the sign of an exactly zero one could), as long as
// every weight is finite (0 * inf is NaN), which PackedMatrix::finite() tells.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/activation.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_tiling.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/transpose_avx512.h"

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), which -W(maybe-)uninitialized
// reports at every inlined use (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define TNMT_AVX512_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))
#define TNMT_AVX2_TARGET __attribute__((target("avx2,fma")))
#endif

namespace tnmt::kernels::cpu {

namespace {

constexpr int kNr = 32;     // output columns per panel
constexpr int kMaxMr = 14;  // rows per register tile (AVX-512; the most of any path)
constexpr int kMaxMrAvx2 = 6;  // rows per register tile of the AVX2 kernel
constexpr int kSparseGroupRows = 4;  // AVX-512 rows per step mask (7: that product 5-10% slower; 14: 30-45%)
constexpr int kSparseGroupRowsAvx2 = 3;  // AVX2 (KernelAvx2Sparse: up to 3 rows x 32 columns)
constexpr int kKc = 512;    // k per block (256 and 1024: 2-4% slower at decode shapes)
constexpr int kMc = 448;    // rows packed per pass (bounds the activation buffer to kMc * k)
// GemmPacked splits rows over the threads (instead of panels) from kRowSplitMinRows rows per
// thread, each thread taking an equal share of the rows (kRowBlock = 1: any split gives the
// same results, so the shares need not follow the tiles).
constexpr int kRowSplitMinRows = 96;
constexpr int kRowBlock = 1;

// The first row of group g of a tile of mr rows split into `groups` groups (g = groups: mr).
inline int SparseGroup(int mr, int groups, int g) { return g * mr / groups; }

// How a tile's accumulators start: 0, the bias, c, or c + bias.
enum class Init { kZero, kBias, kLoad, kLoadBias };

// Portable kernel on the packed layout: CPUs without AVX2 + FMA, and tests or
// TNMT_CPU_ISA=portable. Each element is init, then + a[i,p] * b[p,j] in k order (fused or
// not, as the target clone the CPU selects compiles it: one way for every element), so here
// too a row's results do not depend on m or on the thread count.
TNMT_VECTORIZE void KernelPortable(int mr, int kc, const float* a, const float* b, float* c,
                                   int64_t ldc, int nvalid, Init init, const float* bias, bool relu) {
  float acc[kMaxMr][kNr];
  for (int i = 0; i < mr; ++i) {
    for (int j = 0; j < kNr; ++j) {
      float x = 0.0f;
      if (j < nvalid && (init == Init::kLoad || init == Init::kLoadBias)) x = c[i * ldc + j];
      if (j < nvalid && (init == Init::kBias || init == Init::kLoadBias)) x += bias[j];
      acc[i][j] = x;
    }
  }
  for (int p = 0; p < kc; ++p) {
    for (int i = 0; i < mr; ++i) {
      const float ai = a[p * mr + i];
#pragma omp simd
      for (int j = 0; j < kNr; ++j) acc[i][j] += ai * b[p * kNr + j];
    }
  }
  for (int i = 0; i < mr; ++i) {
    for (int j = 0; j < nvalid; ++j) c[i * ldc + j] = relu ? (acc[i][j] > 0.0f ? acc[i][j] : 0.0f) : acc[i][j];
  }
}

#if defined(__x86_64__)

// c[MR, 32] (columns masked by m0, m1) = init + a[kc, MR] · b[kc, 32].
// Meanwhile prefetches pf_lines cache lines from pf into L2 (one per k step): the thread's
// next panel, spread over the tiles of this one, so its first tile does not wait on memory.
// kSparse: only the kc steps listed in `steps` (ascending; a and b then point at step 0 of
// the rows and of the panel, a's steps a_stride floats apart: the MR rows may be a group of a
// taller tile), the others being zero in every row of a.
template <int MR, bool kSparse>
TNMT_AVX512_TARGET void Kernel(int kc, const float* a, const float* b, const int32_t* steps, float* c,
                               int64_t ldc, __mmask16 m0, __mmask16 m1, Init init, const float* bias,
                               const char* pf, int pf_lines, bool relu, int a_stride) {
  __m512 c0[MR], c1[MR];
  if (init == Init::kLoad || init == Init::kLoadBias) {
    const __m512 b0 =
        init == Init::kLoadBias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 b1 =
        init == Init::kLoadBias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {  // c as stored (adding a zero bias would turn -0 into +0)
      c0[i] = _mm512_maskz_loadu_ps(m0, c + i * ldc);
      c1[i] = _mm512_maskz_loadu_ps(m1, c + i * ldc + 16);
      if (init == Init::kLoadBias) {
        c0[i] = _mm512_add_ps(c0[i], b0);
        c1[i] = _mm512_add_ps(c1[i], b1);
      }
    }
  } else {
    const __m512 b0 = init == Init::kBias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 b1 =
        init == Init::kBias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      c0[i] = b0;
      c1[i] = b1;
    }
  }
#pragma GCC unroll 2
  for (int p = 0; p < kc; ++p) {
    if (p < pf_lines) _mm_prefetch(pf + 64 * p, _MM_HINT_T1);
    const float* ap = kSparse ? a + static_cast<int64_t>(steps[p]) * a_stride : a;
    const float* bp = kSparse ? b + static_cast<int64_t>(steps[p]) * kNr : b;
    const __m512 b0 = _mm512_load_ps(bp);
    const __m512 b1 = _mm512_load_ps(bp + 16);
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(ap[i]);
      c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
      c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
    }
    if (!kSparse) {
      a += MR;
      b += kNr;
    }
  }
  for (int p = kc; p < pf_lines; ++p) _mm_prefetch(pf + 64 * p, _MM_HINT_T1);  // a short list's rest
  if (relu) {  // max(x, +0): NaN and -0 give +0, as x > 0 ? x : 0
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      c0[i] = _mm512_max_ps(c0[i], zero);
      c1[i] = _mm512_max_ps(c1[i], zero);
    }
  }
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_ps(c + i * ldc, m0, c0[i]);
    _mm512_mask_storeu_ps(c + i * ldc + 16, m1, c1[i]);
  }
}

using KernelFn = void (*)(int, const float*, const float*, const int32_t*, float*, int64_t, __mmask16,
                          __mmask16, Init, const float*, const char*, int, bool, int);

template <bool kSparse, int... MR>
constexpr std::array<KernelFn, sizeof...(MR) + 1> MakeKernels(std::integer_sequence<int, MR...>) {
  return {nullptr, &Kernel<MR + 1, kSparse>...};
}

// kKernels[mr]: the kernel for tiles of mr rows (1..kMaxMr); kSparseKernels[mr]: its sparse
// form for groups of mr rows (1..kSparseGroupRows), the only heights it runs at.
constexpr std::array<KernelFn, kMaxMr + 1> kKernels = MakeKernels<false>(std::make_integer_sequence<int, kMaxMr>{});
constexpr std::array<KernelFn, kSparseGroupRows + 1> kSparseKernels =
    MakeKernels<true>(std::make_integer_sequence<int, kSparseGroupRows>{});


// AVX2: c[MR, 16] (the 16 columns of one panel half, the first valid0 + valid1 of them
// written) = init + a[kc, MR] . b[kc, 16 of 32]. b points at the half's first column of the
// panel's first k row. Prefetches pf_lines lines from pf into L2, as Kernel does.
template <int MR>
TNMT_AVX2_TARGET void KernelAvx2(int kc, const float* a, const float* b, float* c,
                                 int64_t ldc, int valid0, int valid1, Init init, const float* bias,
                                 const char* pf, int pf_lines, bool relu) {
  const __m256i m0 = Avx2LaneMask(valid0), m1 = Avx2LaneMask(valid1);
  __m256 c0[MR], c1[MR];
  const bool with_bias = init == Init::kBias || init == Init::kLoadBias;
  const __m256 b0 = with_bias ? _mm256_maskload_ps(bias, m0) : _mm256_setzero_ps();
  const __m256 b1 = with_bias ? _mm256_maskload_ps(bias + 8, m1) : _mm256_setzero_ps();
  // All 16 columns valid (every tile but a last partial panel's): plain loads (and stores,
  // Avx2StoreFirst), which are cheaper than masked ones on some AVX2 CPUs.
  const bool full = valid0 == 8 && valid1 == 8;
  if (init == Init::kLoad || init == Init::kLoadBias) {
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      c0[i] = full ? _mm256_loadu_ps(c + i * ldc) : _mm256_maskload_ps(c + i * ldc, m0);
      c1[i] = full ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_maskload_ps(c + i * ldc + 8, m1);
      if (init == Init::kLoadBias) {
        c0[i] = _mm256_add_ps(c0[i], b0);
        c1[i] = _mm256_add_ps(c1[i], b1);
      }
    }
  } else {
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      c0[i] = b0;
      c1[i] = b1;
    }
  }
#pragma GCC unroll 2
  for (int p = 0; p < kc; ++p) {
    if (p < pf_lines) _mm_prefetch(pf + 64 * p, _MM_HINT_T1);
    const __m256 v0 = _mm256_load_ps(b);
    const __m256 v1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      c0[i] = _mm256_fmadd_ps(ai, v0, c0[i]);
      c1[i] = _mm256_fmadd_ps(ai, v1, c1[i]);
    }
    a += MR;
    b += kNr;
  }
  for (int p = kc; p < pf_lines; ++p) _mm_prefetch(pf + 64 * p, _MM_HINT_T1);
  if (relu) {  // max(x, +0): NaN and -0 give +0, as x > 0 ? x : 0
    const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      c0[i] = _mm256_max_ps(c0[i], zero);
      c1[i] = _mm256_max_ps(c1[i], zero);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    Avx2StoreFirst(c + i * ldc, valid0, c0[i]);
    Avx2StoreFirst(c + i * ldc + 8, valid1, c1[i]);
  }
}

using KernelAvx2Fn = void (*)(int, const float*, const float*, float*, int64_t, int, int, Init, const float*,
                              const char*, int, bool);

template <int... MR>
constexpr std::array<KernelAvx2Fn, sizeof...(MR) + 1> MakeKernelsAvx2(std::integer_sequence<int, MR...>) {
  return {nullptr, &KernelAvx2<MR + 1>...};
}

// kKernelsAvx2[mr]: the AVX2 kernel for tiles of mr rows (1..kMaxMrAvx2).
constexpr std::array<KernelAvx2Fn, kMaxMrAvx2 + 1> kKernelsAvx2 =
    MakeKernelsAvx2(std::make_integer_sequence<int, kMaxMrAvx2>{});

// The AVX2 path for one tile and one panel: both 16-column halves that have valid columns
// (the first half prefetches, as Kernel).
TNMT_AVX2_TARGET void TileAvx2(int mr, int kc, const float* a, const float* b, float* c, int64_t ldc, int nvalid,
                               Init init, const float* bias, const char* pf, int pf_lines, bool relu) {
  for (int h = 0; h < 2; ++h) {
    const int valid = nvalid - 16 * h;
    if (valid <= 0) break;
    kKernelsAvx2[mr](kc, a, b + 16 * h, c + 16 * h, ldc, std::min(valid, 8), std::max(0, std::min(valid - 8, 8)),
                init, bias != nullptr ? bias + 16 * h : nullptr, h == 0 ? pf : nullptr, h == 0 ? pf_lines : 0, relu);
  }
}

// The AVX2 path's sparse kernel for a group of MR <= 3 rows of a tile: c[MR, 32] (the first
// nvalid columns written) = init + a . b over the kc steps listed in `steps`, a's steps
// a_stride floats apart, b at the panel's step 0; prefetches as Kernel. The whole panel row in
// one pass: 12 ymm accumulators cover the FMA latency, where a 3-row, 16-column kernel's 6 would
// not. The same FMA chain per element as KernelAvx2 and Kernel.
template <int MR>
TNMT_AVX2_TARGET void KernelAvx2Sparse(int kc, const float* a, const float* b, const int32_t* steps, float* c,
                                       int64_t ldc, int nvalid, Init init, const float* bias, const char* pf,
                                       int pf_lines, bool relu, int a_stride) {
  int valid[4];
  __m256i mask[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    valid[j] = std::max(0, std::min(8, nvalid - 8 * j));
    mask[j] = Avx2LaneMask(valid[j]);
  }
  __m256 acc[MR][4];
  const bool with_bias = init == Init::kBias || init == Init::kLoadBias;
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m256 bj = with_bias ? _mm256_maskload_ps(bias + 8 * j, mask[j]) : _mm256_setzero_ps();
#pragma GCC unroll 3
    for (int i = 0; i < MR; ++i) {
      if (init == Init::kLoad || init == Init::kLoadBias) {
        acc[i][j] = _mm256_maskload_ps(c + i * ldc + 8 * j, mask[j]);
        if (init == Init::kLoadBias) acc[i][j] = _mm256_add_ps(acc[i][j], bj);
      } else {
        acc[i][j] = bj;
      }
    }
  }
#pragma GCC unroll 2
  for (int p = 0; p < kc; ++p) {
    if (p < pf_lines) _mm_prefetch(pf + 64 * p, _MM_HINT_T1);
    const float* ap = a + static_cast<int64_t>(steps[p]) * a_stride;
    const float* bp = b + static_cast<int64_t>(steps[p]) * kNr;
    __m256 ai[MR];
#pragma GCC unroll 3
    for (int i = 0; i < MR; ++i) ai[i] = _mm256_broadcast_ss(ap + i);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256 bj = _mm256_load_ps(bp + 8 * j);
#pragma GCC unroll 3
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(ai[i], bj, acc[i][j]);
    }
  }
  for (int p = kc; p < pf_lines; ++p) _mm_prefetch(pf + 64 * p, _MM_HINT_T1);
  const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 3
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      Avx2StoreFirst(c + i * ldc + 8 * j, valid[j], relu ? _mm256_max_ps(acc[i][j], zero) : acc[i][j]);
    }
  }
}

using KernelAvx2SparseFn = void (*)(int, const float*, const float*, const int32_t*, float*, int64_t, int, Init,
                                    const float*, const char*, int, bool, int);
constexpr std::array<KernelAvx2SparseFn, kSparseGroupRowsAvx2 + 1> kKernelsAvx2Sparse = {
    nullptr, &KernelAvx2Sparse<1>, &KernelAvx2Sparse<2>, &KernelAvx2Sparse<3>};

// PackRows (below) with 16 x 16 transposes: 16 columns of the tile's rows per step. For each
// of the tile's `groups` groups of rows (SparseGroup), marks the k steps at which some row of
// the group is not zero (NaN included): bit q of byte j of masks + g * stride is step
// 8 * j + q (stride >= k / 8 rounded up to 2 bytes; 16-bit stores).
TNMT_AVX512_TARGET void PackTileAvx512(float* d, const float* a, int64_t lda, int mr, int k, int groups,
                                       int64_t stride, uint8_t* masks) {
  const __mmask16 row_mask = static_cast<__mmask16>((1u << mr) - 1u);
  const __m512 zero = _mm512_setzero_ps();
  __m512 r[16], c[16];
  int group_end[kMaxMr];
  for (int g = 0; g < groups; ++g) group_end[g] = SparseGroup(mr, groups, g + 1);
  for (int i = mr; i < 16; ++i) r[i] = _mm512_setzero_ps();
  for (int p0 = 0; p0 < k; p0 += 16) {
    const int kt = std::min(16, k - p0);
    const __mmask16 col_mask = static_cast<__mmask16>((1u << kt) - 1u);
    for (int g = 0, i = 0; g < groups; ++g) {
      __mmask16 nonzero = 0;  // masked-off lanes load as zero
      for (; i < group_end[g]; ++i) {
        r[i] = _mm512_maskz_loadu_ps(col_mask, a + i * lda + p0);
        nonzero |= _mm512_cmp_ps_mask(r[i], zero, _CMP_NEQ_UQ);
      }
      const uint16_t bits = nonzero;
      std::memcpy(masks + g * stride + p0 / 8, &bits, sizeof(bits));
    }
    Transpose16(r, c);
    for (int q = 0; q < kt; ++q) _mm512_mask_storeu_ps(d + (p0 + q) * mr, row_mask, c[q]);
  }
}

// c[q] lane i = r[i] lane q (8 x 8 transpose; Transpose16's first two steps on 256-bit
// vectors, then one 128-bit lane exchange).
TNMT_AVX2_TARGET inline void Transpose8(const __m256* r, __m256* c) {
  __m256 t[8], u[8];
  for (int j = 0; j < 4; ++j) {
    t[2 * j] = _mm256_unpacklo_ps(r[2 * j], r[2 * j + 1]);
    t[2 * j + 1] = _mm256_unpackhi_ps(r[2 * j], r[2 * j + 1]);
  }
  for (int g = 0; g < 2; ++g) {
    u[4 * g + 0] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // u[s] (rows 0-3) and u[4 + s] (rows 4-7) hold columns s (low 128 bits) and 4 + s (high).
  for (int s = 0; s < 4; ++s) {
    c[s] = _mm256_permute2f128_ps(u[s], u[4 + s], 0x20);
    c[4 + s] = _mm256_permute2f128_ps(u[s], u[4 + s], 0x31);
  }
}

// kCompressed8[bits]: the positions of bits' set bits (0-7), ascending, then zeros.
constexpr std::array<std::array<int32_t, 8>, 256> Compressed8() {
  std::array<std::array<int32_t, 8>, 256> t{};
  for (int bits = 0; bits < 256; ++bits) {
    int n = 0;
    for (int q = 0; q < 8; ++q) {
      if (bits & (1 << q)) t[bits][n++] = q;
    }
  }
  return t;
}
alignas(32) constexpr std::array<std::array<int32_t, 8>, 256> kCompressed8 = Compressed8();

// PackRows (below) for the AVX2 path's tiles (mr <= 8) with 8 x 8 transposes: 8 columns of
// the tile's rows per step (rows past mr are zero). Each k row is stored as a whole vector, in
// increasing order, so its lanes past mr land where the next k row (or the next tile) is stored
// afterwards; only the tile's last row spills, into the slack PackRows keeps past its buffer
// (masked stores are slow on some AVX2 CPUs). Marks the k steps at which some row of each
// group of rows is not zero in masks, as PackTileAvx512 does (8-bit stores).
TNMT_AVX2_TARGET void PackTileAvx2(float* d, const float* a, int64_t lda, int mr, int k, int groups, int64_t stride,
                                   uint8_t* masks) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 r[8], c[8];
  int group_end[kMaxMrAvx2];
  for (int g = 0; g < groups; ++g) group_end[g] = SparseGroup(mr, groups, g + 1);
  for (int i = mr; i < 8; ++i) r[i] = _mm256_setzero_ps();
  for (int p0 = 0; p0 < k; p0 += 8) {
    const int kt = std::min(8, k - p0);
    if (kt == 8) {
      for (int i = 0; i < mr; ++i) r[i] = _mm256_loadu_ps(a + i * lda + p0);
    } else {
      const __m256i col_mask = Avx2LaneMask(kt);
      for (int i = 0; i < mr; ++i) r[i] = _mm256_maskload_ps(a + i * lda + p0, col_mask);
    }
    for (int g = 0, i = 0; g < groups; ++g) {
      int nonzero = 0;  // bit q: step p0 + q (masked-off lanes load as zero)
      for (; i < group_end[g]; ++i) nonzero |= _mm256_movemask_ps(_mm256_cmp_ps(r[i], zero, _CMP_NEQ_UQ));
      masks[g * stride + p0 / 8] = static_cast<uint8_t>(nonzero);
    }
    Transpose8(r, c);
    for (int q = 0; q < kt; ++q) _mm256_storeu_ps(d + (p0 + q) * mr, c[q]);
  }
}

// The steps marked in masks (bit q of byte j: step 8 * j + q) among the kc steps from k0 (a
// multiple of 8; masks points at k0's byte), as absolute steps into steps, ascending, in
// whole 8-entry stores (up to 7 entries past the count written too); returns their count.
TNMT_AVX2_TARGET int ListSteps(const uint8_t* masks, int k0, int kc, int32_t* steps) {
  int n = 0;
  for (int q = 0; q < kc; q += 8) {
    const uint8_t bits = masks[q / 8];
    const __m256i listed = _mm256_load_si256(reinterpret_cast<const __m256i*>(kCompressed8[bits].data()));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(steps + n), _mm256_add_epi32(listed, _mm256_set1_epi32(k0 + q)));
    n += __builtin_popcount(bits);
  }
  return n;
}

#else
int ListSteps(const uint8_t* masks, int k0, int kc, int32_t* steps) {
  int n = 0;
  for (int q = 0; q < kc; ++q) {
    if ((masks[q / 8] >> (q % 8)) & 1) steps[n++] = k0 + q;
  }
  return n;
}
#endif  // __x86_64__

// How many of the kc steps from a multiple of 8 masks marks (bits past the last step are 0).
int CountSteps(const uint8_t* masks, int kc) {
  const int bytes = (kc + 7) / 8;
  int n = 0, j = 0;
  for (; j + 8 <= bytes; j += 8) {
    uint64_t word;
    std::memcpy(&word, masks + j, sizeof(word));
    n += __builtin_popcountll(word);
  }
  for (; j < bytes; ++j) n += __builtin_popcount(masks[j]);
  return n;
}

// Per group of rows of each row tile of a packed block (`groups` groups per tile), the k steps
// at which some row of the group is not zero, as bits (bit q of byte j: step 8 * j + q; bits
// past k are zero), group g of tile t's at (t * groups + g) * stride bytes; `recorded` false
// where packing did not look (the portable path).
struct NonzeroSteps {
  std::vector<uint8_t> mask;
  int groups = 1;
  int64_t stride = 0;  // k / 8 rounded up to a multiple of 2 (PackTileAvx512's 16-bit stores)
  bool recorded = false;
  const uint8_t* masks(int t, int g) const { return mask.data() + (t * groups + g) * stride; }
};

// The tiling's rows of a packed into `buffer` (grown as needed) and returned, tile by tile: rows
// [start, start + mr) of a as [k, mr] (k-major) at start * k; the steps at which each of the
// tiles' groups of rows is not zero marked in *steps. The buffer keeps 8 floats of slack past
// the packed rows, which PackTileAvx2's whole-vector stores may write.
const float* PackRows(std::vector<float>* buffer, NonzeroSteps* steps, const float* a, int lda, int k,
                      const Tiling& tiling, CpuIsa isa) {
  constexpr size_t kSlack = 8;
  float* dst = GrowScratch(buffer, static_cast<size_t>(tiling.start(tiling.tiles)) * k + kSlack);
  // Every tile has rows(0) or rows(0) - 1 rows, and so at least as many rows as groups.
  const int group_rows = isa == CpuIsa::kAvx512 ? kSparseGroupRows : kSparseGroupRowsAvx2;
  const int groups = (tiling.rows(0) + group_rows - 1) / group_rows;
  steps->groups = groups;
  steps->stride = RoundUp(k, 16) / 8;
  steps->recorded = false;
  uint8_t* mask = GrowScratch(&steps->mask, static_cast<size_t>(tiling.tiles * groups) * steps->stride);
  for (int t = 0; t < tiling.tiles; ++t) {
    const int mr = tiling.rows(t), r0 = tiling.start(t);
    float* d = dst + static_cast<int64_t>(r0) * k;
    uint8_t* tm = mask + t * groups * steps->stride;
#if defined(__x86_64__)
    if (isa == CpuIsa::kAvx512) {
      PackTileAvx512(d, a + static_cast<int64_t>(r0) * lda, lda, mr, k, groups, steps->stride, tm);
      steps->recorded = true;
      continue;
    }
    if (isa == CpuIsa::kAvx2 && tiling.rows(0) <= 8) {
      PackTileAvx2(d, a + static_cast<int64_t>(r0) * lda, lda, mr, k, groups, steps->stride, tm);
      steps->recorded = true;
      continue;
    }
#endif
    for (int i = 0; i < mr; ++i) {
      const float* src = a + static_cast<int64_t>(r0 + i) * lda;
      for (int p = 0; p < k; ++p) d[static_cast<int64_t>(p) * mr + i] = src[p];
    }
  }
  return dst;
}

}  // namespace

int64_t PackedMatrix::bytes() const {
  if (int8_ != nullptr) return PackedInt8Bytes(*int8_, n_);
  return empty() ? 0
                 : static_cast<int64_t>((n_ + kNr - 1) / kNr) * kNr * k_ *
                       static_cast<int64_t>(sizeof(float));
}

PackedMatrix PackedMatrix::Pack(int n, int k, const float* b, int ldb) {
  PackedMatrix out;
  if (n <= 0 || k <= 0) return out;
  const int panels = (n + kNr - 1) / kNr;
  const size_t bytes = static_cast<size_t>(panels) * kNr * k * sizeof(float);
  float* data = static_cast<float*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  if (data == nullptr) return out;
  ParallelForLarge(panels, static_cast<int64_t>(kNr) * k, [&](int64_t p_begin, int64_t p_end) {
    for (int64_t p = p_begin; p < p_end; ++p) {
      float* panel = data + p * k * kNr;
      for (int j = 0; j < kNr; ++j) {
        const int64_t col = p * kNr + j;
        const float* src = col < n ? b + col * ldb : nullptr;
        for (int q = 0; q < k; ++q) panel[static_cast<int64_t>(q) * kNr + j] = src ? src[q] : 0.0f;
      }
    }
  });
  out.data_ = std::shared_ptr<const float>(
      data, [](const float* p) { std::free(const_cast<float*>(p)); });
  out.n_ = n;
  out.k_ = k;
  out.finite_ = true;
  for (int j = 0; j < n && out.finite_; ++j) {
    for (int q = 0; q < k; ++q) out.finite_ = out.finite_ && std::isfinite(b[static_cast<int64_t>(j) * ldb + q]);
  }
  return out;
}

void GemmPacked(int m, const float* a, int lda, const PackedMatrix& b, const float* bias,
                bool accumulate, float* c, int ldc, bool relu) {
  if (b.is_int8()) {
    GemmPackedInt8(m, a, lda, b, bias, accumulate, c, ldc);
    if (relu && m > 0) {
      const int n = b.n();
      ParallelForLarge(m, n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) BiasActivation(c + i * ldc, nullptr, 1, n, Activation::kRelu);
      });
    }
    return;
  }
  const int n = b.n(), k = b.k();
  if (m <= 0 || n <= 0) return;
  const int panels = (n + kNr - 1) / kNr;
  const CpuIsa isa = ActiveIsa();
  const bool avx512 = isa == CpuIsa::kAvx512, avx2 = isa == CpuIsa::kAvx2;
  const int max_mr = avx2 ? kMaxMrAvx2 : kMaxMr;
  // Zero steps may be skipped only when every weight is finite (0 * inf is NaN).
  const bool may_skip = b.finite();
  // Rows [r_begin, r_end) times panels [p_begin, p_end), the rows packed into `packed` (and
  // their nonzero steps into `steps`) first when pack.
  auto compute = [&](int r_begin, int r_end, int64_t p_begin, int64_t p_end, const float* pa, bool pack,
                     std::vector<float>* packed, NonzeroSteps* steps) {
    const int mc = r_end - r_begin;
    const Tiling tiling(mc, max_mr);
    if (pack) {
      pa = PackRows(packed, steps, a + static_cast<int64_t>(r_begin) * lda, lda, k, tiling, isa);
    }
    // Per group of each tile, where the sparse kernel runs the tile's current k block (each of
    // its groups not zero at 3/4 of the block's steps or fewer), the steps at which it is not
    // zero (at part(t, g)) and how many; the tile's first group's count -1 where the dense
    // kernel runs the tile's block.
    const int groups = steps->groups;
    constexpr int kListStride = kKc + 8;  // ListSteps' whole 8-entry stores
    thread_local std::vector<int32_t> list_steps;
    thread_local std::vector<int> list_len;
    int32_t* lists = GrowScratch(&list_steps, static_cast<size_t>(tiling.tiles * groups) * kListStride);
    int* len = GrowScratch(&list_len, static_cast<size_t>(tiling.tiles) * groups);
    auto part = [&](int t, int g) { return lists + (t * groups + g) * kListStride; };
    float* cm = c + static_cast<int64_t>(r_begin) * ldc;
    for (int k0 = 0; k0 < k; k0 += kKc) {
      const int kc = std::min(kKc, k - k0);
      for (int t = 0; t < tiling.tiles; ++t) {
        bool sparse = may_skip && steps->recorded;
        for (int g = 0; g < groups && sparse; ++g) sparse = 4 * CountSteps(steps->masks(t, g) + k0 / 8, kc) <= 3 * kc;
        len[t * groups] = -1;
        for (int g = 0; g < groups && sparse; ++g) {
          len[t * groups + g] = ListSteps(steps->masks(t, g) + k0 / 8, k0, kc, part(t, g));
        }
      }
      const bool last = k0 + kc >= k;  // the ReLU, if any, as the last k block stores c
      const Init init = k0 > 0      ? Init::kLoad
                        : accumulate  ? (bias != nullptr ? Init::kLoadBias : Init::kLoad)
                        : bias != nullptr ? Init::kBias
                                          : Init::kZero;
      for (int64_t p = p_begin; p < p_end; ++p) {
        const int col = static_cast<int>(p) * kNr;
        const int nvalid = std::min(kNr, n - col);
        const float* pb = b.data() + (p * k + k0) * kNr;
        const float* pbias = bias != nullptr ? bias + col : nullptr;
        // The block this thread computes next (the next panel's, or the first panel's in the
        // next k block): kc' x 32 floats, 2 lines per k step, prefetched in slices.
        const char* next = nullptr;
        int next_lines = 0;
        if (p + 1 < p_end) {
          next = reinterpret_cast<const char*>(pb + static_cast<int64_t>(k) * kNr);
          next_lines = 2 * kc;
        } else if (k0 + kKc < k) {
          next = reinterpret_cast<const char*>(b.data() + (p_begin * k + k0 + kKc) * kNr);
          next_lines = 2 * std::min(kKc, k - k0 - kKc);
        }
        const int slice = (next_lines + tiling.tiles - 1) / tiling.tiles;
        for (int t = 0; t < tiling.tiles; ++t) {
          const int mr = tiling.rows(t), r0 = tiling.start(t);
          const float* ta = pa + static_cast<int64_t>(r0) * k + static_cast<int64_t>(k0) * mr;
          float* tc = cm + static_cast<int64_t>(r0) * ldc + col;
#if defined(__x86_64__)
          // This tile's slice of the next block (no lines when there is none: next_lines is 0).
          const int first = t * slice, lines = std::max(0, std::min(slice, next_lines - first));
          const char* pf = next != nullptr ? next + 64 * first : nullptr;
          // The sparse kernel: each group's listed steps only, from the tile's and the panel's
          // step 0.
          const bool sparse = len[t * groups] >= 0;
          const float* sa = pa + static_cast<int64_t>(r0) * k;
          const float* sb = b.data() + p * k * kNr;
          if (avx512) {
            const __mmask16 lo = nvalid >= 16 ? 0xFFFF : (1u << nvalid) - 1;
            const __mmask16 hi = nvalid >= 32 ? 0xFFFF : nvalid <= 16 ? 0 : (1u << (nvalid - 16)) - 1;
            if (!sparse) {
              kKernels[mr](kc, ta, pb, nullptr, tc, ldc, lo, hi, init, pbias, pf, lines, relu && last, mr);
              continue;
            }
            for (int g = 0; g < groups; ++g) {  // the first group prefetches
              const int g0 = SparseGroup(mr, groups, g), g1 = SparseGroup(mr, groups, g + 1);
              kSparseKernels[g1 - g0](len[t * groups + g], sa + g0, sb, part(t, g), tc + g0 * ldc, ldc, lo, hi,
                                       init, pbias, g == 0 ? pf : nullptr, g == 0 ? lines : 0, relu && last, mr);
            }
            continue;
          }
          if (avx2) {
            if (!sparse) {
              TileAvx2(mr, kc, ta, pb, tc, ldc, nvalid, init, pbias, pf, lines, relu && last);
              continue;
            }
            for (int g = 0; g < groups; ++g) {  // the first group prefetches
              const int g0 = SparseGroup(mr, groups, g), g1 = SparseGroup(mr, groups, g + 1);
              kKernelsAvx2Sparse[g1 - g0](len[t * groups + g], sa + g0, sb, part(t, g), tc + g0 * ldc, ldc, nvalid,
                                          init, pbias, g == 0 ? pf : nullptr, g == 0 ? lines : 0, relu && last, mr);
            }
            continue;
          }
#endif
          KernelPortable(mr, kc, ta, pb, tc, ldc, nvalid, init, pbias, relu && last);
        }
      }
    }
  };
  const int threads = ComputeThreads();
  if (threads > 1 && m >= kRowSplitMinRows * threads) {
    // Many rows (decoder steps over large batches): each thread packs and computes its own
    // rows against every panel, so packing runs in parallel too. Per element the arithmetic is
    // the same as below (the same FMA chain), so results do not change.
    const int64_t blocks = (m + kRowBlock - 1) / kRowBlock;
    ParallelFor(blocks, [&](int64_t b_begin, int64_t b_end) {
      thread_local std::vector<float> packed;
      thread_local NonzeroSteps steps;
      const int r_begin = static_cast<int>(b_begin * kRowBlock);
      const int r_end = static_cast<int>(std::min<int64_t>(m, b_end * kRowBlock));
      for (int r0 = r_begin; r0 < r_end; r0 += kMc) {
        compute(r0, std::min(r_end, r0 + kMc), 0, panels, nullptr, true, &packed, &steps);
      }
    });
    return;
  }
  // Activations, packed per call by the calling thread; read by every compute thread.
  thread_local std::vector<float> packed_a;
  thread_local NonzeroSteps a_steps;
  NonzeroSteps* steps = &a_steps;  // (a thread_local: the workers must not name it)
  for (int m0 = 0; m0 < m; m0 += kMc) {
    const int mc = std::min(kMc, m - m0);
    const float* pa = PackRows(&packed_a, steps, a + static_cast<int64_t>(m0) * lda, lda, k, Tiling(mc, max_mr), isa);
    ParallelFor(panels, [&](int64_t p_begin, int64_t p_end) {
      compute(m0, m0 + mc, p_begin, p_end, pa, false, nullptr, steps);
    });
  }
}

// Measured (AVX-512 kernel) on a Xeon with AVX-512, 1 and 2 threads; best of 15 alternating
// runs, weights cycled through 24 copies so they come from L3 as in a decode step):
// GemmPacked / cblas_sgemm = 1.2-1.3x at m = 128 (decoder steps: q/k/v, out_proj, fc1, fc2,
// logits), 1.9-2x at m = 32, 2-3x at m = 1..8, 1.0-1.07x at m = 640 (encoder shapes). No
// shape class lost, so every packed matrix is used.
bool PreferPacked(int m, const PackedMatrix& b) { return !b.empty() && m > 0; }

}  // namespace tnmt::kernels::cpu
