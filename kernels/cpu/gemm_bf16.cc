// bfloat16 GEMM for mixed-precision training; see gemm.h (GemmBf16).
//
// AVX-512 BF16 kernel: vdpbf16ps multiplies 16 lanes of bfloat16 pairs and adds both products
// of a lane to its float32 accumulator: 32 multiply-adds per instruction, twice vfmadd231ps's 16,
// at the same instruction rate on the CPUs that have it (a Zen 4 core: 234 against 117 GFLOP/s
// in a register-only loop). Both operands are packed per call into pairs along k (element 2p in
// the low half of a 32-bit lane, 2p + 1 in the high half, a zero past an odd k): b into panels of
// 32 columns stored [pairs, 32], a into tiles of up to 14 rows stored [pairs, rows] (a stored
// transposed) or row by row (a not transposed: its pairs lie along its rows already). A tile of
// c, 14 rows x 32 columns, lives in 28 zmm accumulators, as in the float32 kernel
// (gemm_packed.cc). Loop nest: blocks of kKc2 pairs (b's block packed once for every row), row
// blocks of kMc rows (a's block packed), the panels, the row tiles. Threads split the rows when
// there are many (each packs its own blocks of a), else the panels; either way each element of c
// is computed by one thread in the same order whatever the split.
//
// AMX-BF16 kernel (CPUs with AMX, UseAmxBf16): tdpbf16ps multiplies a 16-row x 16-pair tile of a
// by a 16-pair x 16-column tile of b into 16 x 16 float32 sums, 8,192 multiply-adds per
// instruction. b's panels are packed as above ([pairs, 32]: a weight tile is 16 of its rows read
// with a 128-byte stride), with the pairs of a k block rounded up to a multiple of 16 with zeros;
// a is packed row by row in pairs (zeros past the block's pairs; a row stride of those pairs plus
// one cache line), in tiles of 32 rows; c's tile, 32 x 32, lives in four tile registers, loaded
// from c (the first k block without accumulate: from the bias row, or zeroed) and stored back
// once per k block (with accumulate, a bias is added to c first). The sums are those of
// the AVX-512 kernel taken in another order (the instruction's own), so the two kernels' results
// differ in the last bits; each is the same whatever the thread count or the rows around a row.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/amx.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_tiling.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/transpose_avx512.h"
#include "kernels/cpu/vec16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
// (amx-int8 too: amx.h's AmxTileProduct, inlined here, names both tile dot products.)
#define TNMT_BF16_AMX_TARGET                                                            \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512bf16,avx2,fma,amx-tile," \
                        "amx-int8,amx-bf16")))
#endif

namespace tnmt::kernels::cpu {

float RoundToBfloat16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&x, &u, sizeof(u));
  return x;
}

bool HasBf16Gemm() { return UseAvx512() && HasAvx512Bf16(); }

namespace {

// Any CPU: rounded copies of op(a) ([m, k]) and of op(b) transposed ([n, k]), then the float32
// GEMM.
void GemmBf16Portable(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b,
                      int ldb, const float* bias, bool accumulate, float* c, int ldc) {
  std::vector<float> ar(static_cast<size_t>(m) * k), br(static_cast<size_t>(n) * k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) ar[i * k + p] = RoundToBfloat16(trans_a ? a[p * lda + i] : a[i * lda + p]);
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t p = 0; p < k; ++p) br[j * k + p] = RoundToBfloat16(trans_b ? b[j * ldb + p] : b[p * ldb + j]);
  }
  GemmNT(m, n, k, 1.0f, ar.data(), k, br.data(), k, accumulate ? 1.0f : 0.0f, c, ldc);
  if (bias != nullptr) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += bias[j];
    }
  }
}

#if defined(__x86_64__)

constexpr int kNr = 32;     // output columns per panel
constexpr int kMaxMr = 14;  // rows per register tile
constexpr int kKc2 = 512;   // pairs (1024 k values) per block: a panel's block is 64 KiB, in L2
constexpr int kMc = 224;    // rows per packed block of a (224 x 512 pairs: 448 KiB, in L2)
constexpr int kTilesPerBlock = kMc / kMaxMr;  // row tiles per packed block of a
// Row tiles per thread from which the threads split c's rows instead of its panels.
constexpr int kTilesPerThread = 4;

__mmask16 FirstLanes(int n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1u);
}

// Operands whose pairs lie along their stored rows (a not transposed, b transposed): output lane
// l of pair q is (src[l][2(p0 + q)], src[l][2(p0 + q) + 1]), row l at src + l * ld, k values
// from k on read as 0. Writes dst[q * stride + l] for q < np and l < lanes (<= 16).
TNMT_BF16_TARGET void PackPairsAlongRows(uint32_t* dst, int64_t stride, const float* src, int64_t ld, int lanes,
                                         int p0, int np, int k) {
  const __mmask16 lane_mask = FirstLanes(lanes);
  __m512 r[16], t[16];
  for (int l = lanes; l < 16; ++l) r[l] = _mm512_setzero_ps();
  for (int q0 = 0; q0 < np; q0 += 16) {
    const int nq = std::min(16, np - q0);
    const int k0 = 2 * (p0 + q0);
    const int kv = std::min(32, k - k0);
    const __mmask16 lo_mask = FirstLanes(kv), hi_mask = FirstLanes(kv - 16);
    for (int l = 0; l < lanes; ++l) {
      const float* s = src + l * ld + k0;
      const __m512 lo = _mm512_maskz_loadu_ps(lo_mask, s);
      const __m512 hi = _mm512_maskz_loadu_ps(hi_mask, s + 16);
      // Words 0-15 from lo, 16-31 from hi: 32-bit lane q holds k0 + 2q (low) and k0 + 2q + 1.
      r[l] = _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
    Transpose16(r, t);
    for (int q = 0; q < nq; ++q) {
      _mm512_mask_storeu_ps(reinterpret_cast<float*>(dst + (q0 + q) * stride), lane_mask, t[q]);
    }
  }
}

// Operands whose pairs lie across two stored rows (a transposed, b not): output lane l of pair
// q is (src[2(p0 + q)][l], src[2(p0 + q) + 1][l]), stored row kk at src + kk * ld, rows from k
// on read as 0. Writes dst[q * stride + l] for q < np and l < lanes (<= 16).
TNMT_BF16_TARGET void PackPairsAcrossRows(uint32_t* dst, int64_t stride, const float* src, int64_t ld, int lanes,
                                          int p0, int np, int k) {
  const __mmask16 lane_mask = FirstLanes(lanes);
  // Word 2i <- word i (the even row), word 2i + 1 <- word 16 + i (the odd row).
  alignas(64) static const uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  for (int q = 0; q < np; ++q) {
    const int64_t kk = 2 * static_cast<int64_t>(p0 + q);
    const __m512 even = _mm512_maskz_loadu_ps(lane_mask, src + kk * ld);
    const __m512 odd = kk + 1 < k ? _mm512_maskz_loadu_ps(lane_mask, src + (kk + 1) * ld) : _mm512_setzero_ps();
    const __m512i words = (__m512i)_mm512_cvtne2ps_pbh(odd, even);
    _mm512_mask_storeu_epi32(dst + q * stride, lane_mask, _mm512_permutexvar_epi16(interleave, words));
  }
}

// Rows of a not transposed, kept row by row: dst[i * row_stride + q] = (src[i][2(p0 + q)],
// src[i][2(p0 + q) + 1]) rounded, for i < rows and q < np (k values from k on read as 0). No
// transpose: the kernel reads each row's pairs at a fixed stride.
TNMT_BF16_TARGET void PackRowPairs(uint32_t* dst, const float* src, int64_t ld, int rows, int p0, int np, int k,
                                   int64_t row_stride = kKc2) {
  for (int i = 0; i < rows; ++i) {
    for (int q0 = 0; q0 < np; q0 += 16) {
      const int k0 = 2 * (p0 + q0);
      const int kv = std::min(32, k - k0);
      const float* s = src + i * ld + k0;
      const __m512 lo = _mm512_maskz_loadu_ps(FirstLanes(kv), s);
      const __m512 hi = _mm512_maskz_loadu_ps(FirstLanes(kv - 16), s + 16);
      _mm512_mask_storeu_epi32(dst + i * row_stride + q0, FirstLanes(np - q0), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
}

// PackPairsAcrossRows for a given as bfloat16 (the bits, row stride ld elements): the same words
// without rounding (each value is a bfloat16 already).
TNMT_BF16_TARGET void PackPairsAcrossRows(uint32_t* dst, int64_t stride, const uint16_t* src, int64_t ld, int lanes,
                                          int p0, int np, int k) {
  const __mmask16 lane_mask = FirstLanes(lanes);
  for (int q = 0; q < np; ++q) {
    const int64_t kk = 2 * static_cast<int64_t>(p0 + q);
    const __m512i even = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lane_mask, src + kk * ld));
    const __m512i odd =
        kk + 1 < k ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lane_mask, src + (kk + 1) * ld)) : _mm512_setzero_si512();
    _mm512_mask_storeu_epi32(dst + q * stride, lane_mask, _mm512_or_si512(even, _mm512_slli_epi32(odd, 16)));
  }
}

// PackRowPairs for a given as bfloat16: each row's pairs are its values as they lie (a zero
// past an odd k; nothing past k is read).
void PackRowPairs(uint32_t* dst, const uint16_t* src, int64_t ld, int rows, int p0, int np, int k,
                  int64_t row_stride = kKc2) {
  const int values = std::min(2 * np, k - 2 * p0);
  for (int i = 0; i < rows; ++i) {
    uint32_t* d = dst + i * row_stride;
    if (values < 2 * np) d[np - 1] = 0;
    std::memcpy(d, src + i * ld + 2 * static_cast<int64_t>(p0), values * sizeof(uint16_t));
  }
}

// c[MR, 32] (columns masked by m0, m1) = (c if load, else 0) (+ bias[32] if not null)
// + a · b[np, 32] in pairs, a as PackPairsAcrossRows leaves it ([np, MR]) or, with kRowsA, as
// PackRowPairs does ([MR, kKc2]).
template <int MR, bool kRowsA>
TNMT_BF16_TARGET void Kernel(int np, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, __mmask16 m0,
                             __mmask16 m1, bool load, const float* bias) {
  __m512 c0[MR], c1[MR];
  const __m512 bias0 = bias != nullptr ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  const __m512 bias1 = bias != nullptr ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    c0[i] = load ? _mm512_add_ps(_mm512_maskz_loadu_ps(m0, c + i * ldc), bias0) : bias0;
    c1[i] = load ? _mm512_add_ps(_mm512_maskz_loadu_ps(m1, c + i * ldc + 16), bias1) : bias1;
  }
#pragma GCC unroll 2
  for (int p = 0; p < np; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 16);
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      const __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(kRowsA ? a[i * kKc2] : a[i]));
      c0[i] = _mm512_dpbf16_ps(c0[i], ai, b0);
      c1[i] = _mm512_dpbf16_ps(c1[i], ai, b1);
    }
    a += kRowsA ? 1 : MR;
    b += kNr;
  }
#pragma GCC unroll 14
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_ps(c + i * ldc, m0, c0[i]);
    _mm512_mask_storeu_ps(c + i * ldc + 16, m1, c1[i]);
  }
}

using KernelFn = void (*)(int, const uint32_t*, const uint32_t*, float*, int64_t, __mmask16, __mmask16, bool,
                          const float*);

template <bool kRowsA, int... R>
constexpr std::array<KernelFn, sizeof...(R) + 1> MakeKernels(std::integer_sequence<int, R...>) {
  return {nullptr, &Kernel<R + 1, kRowsA>...};
}
constexpr auto kKernels = MakeKernels<false>(std::make_integer_sequence<int, kMaxMr>{});
constexpr auto kKernelsRowsA = MakeKernels<true>(std::make_integer_sequence<int, kMaxMr>{});

// b's pairs [p0, p0 + np) in panels of 32 columns, panel j at pb + j * panel_pairs * kNr, stored
// [panel_pairs, 32] with zeros in pairs [np, panel_pairs). b transposed: in half panels of 16
// columns over the threads (each half panel's rows of b are read along their length); else in
// blocks of 16 pairs over the threads, each block across all the half panels. Lanes past n are
// left as they are (they reach only the sums of columns the kernels do not store).
void PackPanels(uint32_t* pb, int panel_pairs, bool trans_b, const float* b, int ldb, int n, int panels, int p0,
                int np, int k) {
  if (!trans_b) {
    // Pairs across rows: blocks of 16 pairs (32 stored rows), each across every half panel, so
    // that the stored rows are read along their length (as PackRowPairsFromColumns reads a).
    const int chunks = (np + 15) / 16;
    ParallelForLarge(chunks, 16 * 2 * static_cast<int64_t>(n), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const int q0 = static_cast<int>(c) * 16, nq = std::min(16, np - q0);
        for (int h = 0; h < 2 * panels; ++h) {
          const int col0 = h * 16;
          const int lanes = std::min(16, n - col0);
          if (lanes <= 0) break;
          uint32_t* dst = pb + (h / 2) * static_cast<int64_t>(panel_pairs) * kNr + (h % 2) * 16;
          PackPairsAcrossRows(dst + static_cast<int64_t>(q0) * kNr, kNr, b + col0, ldb, lanes, p0 + q0, nq, k);
        }
      }
    });
    if (np < panel_pairs) {
      for (int j = 0; j < panels; ++j) {
        uint32_t* panel = pb + static_cast<int64_t>(j) * panel_pairs * kNr;
        std::memset(panel + static_cast<int64_t>(np) * kNr, 0, static_cast<size_t>(panel_pairs - np) * kNr * sizeof(uint32_t));
      }
    }
    return;
  }
  ParallelForLarge(2 * panels, 16 * np, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      const int col0 = static_cast<int>(h) * 16;
      const int lanes = std::min(16, n - col0);
      if (lanes <= 0) continue;
      uint32_t* dst = pb + (h / 2) * panel_pairs * kNr + (h % 2) * 16;
      PackPairsAlongRows(dst, kNr, b + static_cast<int64_t>(col0) * ldb, ldb, lanes, p0, np, k);
      for (int q = np; q < panel_pairs; ++q) std::memset(dst + static_cast<int64_t>(q) * kNr, 0, 16 * sizeof(uint32_t));
    }
  });
}

void GemmBf16Avx512(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                    const float* bias, bool accumulate, float* c, int ldc) {
  const int pairs = (k + 1) / 2;
  const int panels = (n + kNr - 1) / kNr;
  thread_local std::vector<uint32_t> b_buffer, a_buffer;
  for (int p0 = 0; p0 < pairs; p0 += kKc2) {
    const int np = std::min(kKc2, pairs - p0);
    uint32_t* pb = GrowScratch(&b_buffer, static_cast<size_t>(panels) * np * kNr);
    PackPanels(pb, np, trans_b, b, ldb, n, panels, p0, np, k);
    const bool load = accumulate || p0 > 0;
    const int64_t a_rows_at = trans_a ? np : kKc2;  // a tile at row r: pa + r * a_rows_at
    const auto& kernels = trans_a ? kKernels : kKernelsRowsA;
    // A block of row tiles [t0, t1) of `tiles` (at most kTilesPerBlock) is packed at pa, tile
    // t at pa + (its first row - tile t0's) * a_rows_at; pack_a packs tiles [u0, u1) of it.
    const Tiling tiles(m, kMaxMr);
    const auto pack_a = [&](uint32_t* pa, int t0, int64_t u0, int64_t u1) {
      if (trans_a) {
        // Blocks of 16 pairs (32 stored rows), each across the tiles, so that the stored rows
        // are read along their length rather than mr columns of each down the whole k block.
        for (int q0 = 0; q0 < np; q0 += 16) {
          for (int64_t t = u0; t < u1; ++t) {
            const int r = tiles.start(static_cast<int>(t)), mr = tiles.rows(static_cast<int>(t));
            uint32_t* dst = pa + (r - tiles.start(t0)) * a_rows_at;
            PackPairsAcrossRows(dst + static_cast<int64_t>(q0) * mr, mr, a + r, lda, mr, p0 + q0, std::min(16, np - q0), k);
          }
        }
        return;
      }
      for (int64_t t = u0; t < u1; ++t) {
        const int r = tiles.start(static_cast<int>(t)), mr = tiles.rows(static_cast<int>(t));
        PackRowPairs(pa + (r - tiles.start(t0)) * a_rows_at, a + static_cast<int64_t>(r) * lda, lda, mr, p0, np, k);
      }
    };
    const auto multiply = [&](const uint32_t* pa, int t0, int t1, int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        const int cols = std::min(kNr, n - static_cast<int>(j) * kNr);
        const __mmask16 mask0 = FirstLanes(cols), mask1 = FirstLanes(cols - 16);
        const uint32_t* panel = pb + j * np * kNr;
        for (int t = t0; t < t1; ++t) {
          const int r = tiles.start(t), mr = tiles.rows(t);
          kernels[mr](np, pa + (r - tiles.start(t0)) * a_rows_at, panel, c + static_cast<int64_t>(r) * ldc + j * kNr,
                      ldc, mask0, mask1, load, p0 == 0 && bias != nullptr ? bias + j * kNr : nullptr);
        }
      }
    };
    const int threads = ComputeThreads();
    if (threads > 1 && tiles.tiles >= threads * kTilesPerThread) {
      // Many rows: each thread takes a contiguous share of the row tiles, packs its own blocks
      // of a and runs each against every panel; one synchronization per k block.
      ParallelFor(tiles.tiles, [&](int64_t s0, int64_t s1) {
        thread_local std::vector<uint32_t> own_a;
        uint32_t* pa = GrowScratch(&own_a, static_cast<size_t>(kTilesPerBlock) * kMaxMr * a_rows_at);
        for (int t0 = static_cast<int>(s0); t0 < s1; t0 += kTilesPerBlock) {
          const int t1 = std::min<int>(t0 + kTilesPerBlock, static_cast<int>(s1));
          pack_a(pa, t0, t0, t1);
          multiply(pa, t0, t1, 0, panels);
        }
      });
      continue;
    }
    // Few rows (or one thread): blocks of row tiles, each packed by all threads and run with
    // the panels split over the threads.
    uint32_t* pa = GrowScratch(&a_buffer, static_cast<size_t>(kTilesPerBlock) * kMaxMr * a_rows_at);
    for (int t0 = 0; t0 < tiles.tiles; t0 += kTilesPerBlock) {
      const int t1 = std::min(t0 + kTilesPerBlock, tiles.tiles);
      ParallelForLarge(t1 - t0, kMaxMr * np,
                       [&](int64_t u0, int64_t u1) { pack_a(pa, t0, t0 + u0, t0 + u1); });
      ParallelFor(panels, [&](int64_t j0, int64_t j1) { multiply(pa, t0, t1, j0, j1); });
    }
  }
}

// AMX. Pairs per tile row, and row tiles (kAmxTileRows) per packed block of a.
constexpr int kAmxPairs = kAmxBytes / 4;
constexpr int kAmxTilesPerBlock = kMc / kAmxTileRows;

// AMX, a transposed: rows [r, r + rows) of op(a) (columns of the stored a) as PackRowPairs
// leaves rows of a, for several tiles at once: row r + R at dst + (R / 32) * tile_words +
// (R % 32) * row_stride. 16 pairs x 16 rows at a time, packed across rows, then transposed; the
// blocks go across the columns first, so that each pair of stored rows is read along its length
// (32 streams, one line each per block) rather than 64 bytes per row down the whole k block,
// which a stored row of thousands of columns turns into a walk over as many pages.
template <class T>
TNMT_BF16_TARGET void PackRowPairsFromColumns(uint32_t* dst, int64_t tile_words, const T* src, int64_t ld,
                                              int rows, int p0, int np, int k, int64_t row_stride) {
  alignas(64) uint32_t block[16 * 16];
  __m512 r[16], t[16];
  for (int q0 = 0; q0 < np; q0 += 16) {
    const int nq = std::min(16, np - q0);
    for (int l0 = 0; l0 < rows; l0 += 16) {
      const int lanes = std::min(16, rows - l0);
      PackPairsAcrossRows(block, 16, src + l0, ld, lanes, p0 + q0, nq, k);
      for (int q = 0; q < 16; ++q) {
        r[q] = q < nq ? _mm512_maskz_load_ps(FirstLanes(lanes), reinterpret_cast<const float*>(block + 16 * q))
                      : _mm512_setzero_ps();
      }
      Transpose16(r, t);
      for (int l = 0; l < lanes; ++l) {
        const int row = l0 + l;
        uint32_t* d = dst + (row / kAmxTileRows) * tile_words + (row % kAmxTileRows) * row_stride + q0;
        _mm512_mask_storeu_ps(reinterpret_cast<float*>(d), FirstLanes(nq), t[l]);
      }
    }
  }
}

// AMX: the row stride of packed a, in words: the block's pairs rounded up to whole tiles, plus
// one cache line, so that a tile's 16 rows do not all fall into the same few L1 sets.
int AmxRowStride(int np16) { return np16 + 16; }

// AMX: rows [r, r + mr) of op(a) as pairs, `tiles` tiles of 32 rows (the last may have fewer;
// mr <= 32 * tiles) at dst, tile_words apart, row by row in each (AmxRowStride words per row),
// with zeros in pairs [np, np16) and in the rows the kernel reads past the last tile's rows (up
// to 16 or 32).
template <class T>
void PackAmxA(uint32_t* dst, int64_t tile_words, bool trans_a, const T* a, int lda, int r, int mr, int p0, int np,
              int np16, int k) {
  const int64_t stride = AmxRowStride(np16);
  const int tiles = (mr + kAmxTileRows - 1) / kAmxTileRows;
  if (trans_a) {
    PackRowPairsFromColumns(dst, tile_words, a + r, lda, mr, p0, np, k, stride);
  } else {
    for (int t = 0; t < tiles; ++t) {
      const int r0 = t * kAmxTileRows;
      PackRowPairs(dst + t * tile_words, a + static_cast<int64_t>(r + r0) * lda, lda, std::min(kAmxTileRows, mr - r0),
                   p0, np, k, stride);
    }
  }
  for (int t = 0; t < tiles; ++t) {
    uint32_t* tile = dst + t * tile_words;
    const int rows = std::min(kAmxTileRows, mr - t * kAmxTileRows);
    for (int i = 0; i < rows; ++i) std::memset(tile + i * stride + np, 0, (np16 - np) * sizeof(uint32_t));
    const int rows_read = rows > kAmxRows ? kAmxTileRows : kAmxRows;
    for (int i = rows; i < rows_read; ++i) std::memset(tile + i * stride, 0, np16 * sizeof(uint32_t));
  }
}

// AMX: c[mr, 32] (mr <= 32; `cols` columns, masked by m0, m1) = (c if load, else bias[32] in
// every row if bias is not null, else 0) + a · b over `chunks` x 16 pairs, a as PackAmxA leaves
// it (row stride lda_words), b a panel ([pairs, 32]). Whole tiles (16 or 32 rows, 32 columns)
// are loaded from c itself, or from the bias row with a row stride of 0, and stored to c; others
// go through a buffer. (Storing a tile's start values and loading them into the tile at once
// would stall on the store: the tile load cannot take them from the stores in flight.)
TNMT_BF16_AMX_TARGET void KernelAmx(int mr, int cols, int chunks, const uint32_t* a, int64_t lda_words,
                                    const uint32_t* b, float* c, int64_t ldc, __mmask16 m0, __mmask16 m1, bool load,
                                    const float* bias) {
  const bool two = mr > kAmxRows;
  const bool whole = (mr == kAmxRows || mr == kAmxTileRows) && cols == kNr;
  // Where the sums start and end: c itself for whole tiles, else a buffer holding c's part.
  alignas(64) float acc[kAmxTileRows][kNr];
  float* sums = whole ? c : &acc[0][0];
  const int64_t stride_sums = (whole ? ldc : kNr) * sizeof(float);
  if (!whole && (load || bias != nullptr)) {
    const __m512 bias0 = bias != nullptr ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 bias1 = bias != nullptr ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    for (int i = 0; i < (two ? kAmxTileRows : kAmxRows); ++i) {
      const bool real = i < mr && load;
      _mm512_store_ps(&acc[i][0], real ? _mm512_maskz_loadu_ps(m0, c + i * ldc) : bias0);
      _mm512_store_ps(&acc[i][16], real ? _mm512_maskz_loadu_ps(m1, c + i * ldc + 16) : bias1);
    }
  }
  // GCC's tile loads name no memory operand: the packing before this call, and the stores above,
  // must be done first.
  asm volatile("" ::: "memory");
  if (load || (bias != nullptr && !whole)) {
    AmxLoadSums(sums, stride_sums, two);
  } else if (bias != nullptr) {
    AmxLoadSums(bias, 0, two);  // every row of the tiles from the one bias row
  } else {
    AmxZeroSums(two);
  }
  AmxTileProduct<AmxDot::kBf16, /*kPrefetchA=*/true>(
      chunks, reinterpret_cast<const char*>(a), lda_words * sizeof(uint32_t), kAmxRows * lda_words * sizeof(uint32_t),
      kAmxPairs * sizeof(uint32_t), reinterpret_cast<const char*>(b), kNr * sizeof(uint32_t), 16 * sizeof(uint32_t),
      kAmxPairs * kNr * sizeof(uint32_t), two);
  AmxStoreSums(sums, stride_sums, two);
  if (whole) return;
  for (int i = 0; i < mr; ++i) {
    _mm512_mask_storeu_ps(c + i * ldc, m0, _mm512_load_ps(&acc[i][0]));
    _mm512_mask_storeu_ps(c + i * ldc + 16, m1, _mm512_load_ps(&acc[i][16]));
  }
}

// The AMX loop nest: that of GemmBf16Avx512 with 32-row tiles and k blocks rounded up to whole
// tiles of pairs. The sums start from c + bias (the start values of the AVX-512 kernel): with
// accumulate the bias is first added to c; without, the first k block's tiles start from the
// bias row itself (no pass over c).
template <class T>
void GemmBf16Amx(bool trans_a, bool trans_b, int m, int n, int k, const T* a, int lda, const float* b, int ldb,
                 const float* bias, bool accumulate, float* c, int ldc) {
  if (bias != nullptr && accumulate) {
    ParallelForLarge(m, n, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        float* ci = c + i * ldc;
        for (int j = 0; j < n; ++j) ci[j] += bias[j];
      }
    });
    bias = nullptr;
  }
  const int pairs = (k + 1) / 2;
  const int panels = (n + kNr - 1) / kNr;
  const int tiles = (m + kAmxTileRows - 1) / kAmxTileRows;
  // a packed tile: 32 rows of the largest row stride
  constexpr int64_t kTileWords = static_cast<int64_t>(kAmxTileRows) * (kKc2 + 16);
  thread_local std::vector<uint32_t> b_buffer, a_buffer;
  for (int p0 = 0; p0 < pairs; p0 += kKc2) {
    const int np = std::min(kKc2, pairs - p0);
    const int np16 = RoundUp(np, kAmxPairs);
    const int64_t row_stride = AmxRowStride(np16);
    uint32_t* pb = GrowScratch(&b_buffer, static_cast<size_t>(panels) * np16 * kNr);
    PackPanels(pb, np16, trans_b, b, ldb, n, panels, p0, np, k);
    const bool load = accumulate || p0 > 0;
    const auto pack_a = [&](uint32_t* pa, int t0, int64_t u0, int64_t u1) {
      const int r = static_cast<int>(u0) * kAmxTileRows;
      PackAmxA(pa + (u0 - t0) * kTileWords, kTileWords, trans_a, a, lda, r,
               std::min(static_cast<int>(u1) * kAmxTileRows, m) - r, p0, np, np16, k);
    };
    const auto multiply = [&](const uint32_t* pa, int t0, int t1, int64_t j0, int64_t j1) {
      AmxBegin();
      for (int64_t j = j0; j < j1; ++j) {
        const int cols = std::min(kNr, n - static_cast<int>(j) * kNr);
        const __mmask16 mask0 = FirstLanes(cols), mask1 = FirstLanes(cols - 16);
        const uint32_t* panel = pb + j * np16 * kNr;
        for (int t = t0; t < t1; ++t) {
          const int r = t * kAmxTileRows;
          KernelAmx(std::min(kAmxTileRows, m - r), cols, np16 / kAmxPairs, pa + (t - t0) * kTileWords, row_stride,
                    panel, c + static_cast<int64_t>(r) * ldc + j * kNr, ldc, mask0, mask1, load,
                    p0 == 0 && bias != nullptr ? bias + j * kNr : nullptr);
        }
      }
      AmxEnd();
    };
    const int threads = ComputeThreads();
    if (threads > 1 && tiles >= threads * 2) {
      // Many rows: each thread takes a contiguous share of the row tiles (as GemmBf16Avx512).
      ParallelFor(tiles, [&](int64_t s0, int64_t s1) {
        thread_local std::vector<uint32_t> own_a;
        uint32_t* pa = GrowScratch(&own_a, static_cast<size_t>(kAmxTilesPerBlock) * kTileWords);
        for (int t0 = static_cast<int>(s0); t0 < s1; t0 += kAmxTilesPerBlock) {
          const int t1 = std::min<int>(t0 + kAmxTilesPerBlock, static_cast<int>(s1));
          pack_a(pa, t0, t0, t1);
          multiply(pa, t0, t1, 0, panels);
        }
      });
      continue;
    }
    uint32_t* pa = GrowScratch(&a_buffer, static_cast<size_t>(kAmxTilesPerBlock) * kTileWords);
    for (int t0 = 0; t0 < tiles; t0 += kAmxTilesPerBlock) {
      const int t1 = std::min(t0 + kAmxTilesPerBlock, tiles);
      ParallelForLarge(t1 - t0, kAmxTileRows * np, [&](int64_t u0, int64_t u1) { pack_a(pa, t0, t0 + u0, t0 + u1); });
      ParallelFor(panels, [&](int64_t j0, int64_t j1) { multiply(pa, t0, t1, j0, j1); });
    }
  }
}

#endif  // defined(__x86_64__)

}  // namespace

void GemmBf16(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
              const float* bias, bool accumulate, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0.0f) + (bias != nullptr ? bias[j] : 0.0f);
      }
    }
    return;
  }
#if defined(__x86_64__)
  if (UseAmxBf16()) {
    GemmBf16Amx(trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, accumulate, c, ldc);
    return;
  }
  if (HasBf16Gemm()) {
    GemmBf16Avx512(trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, accumulate, c, ldc);
    return;
  }
#endif
  GemmBf16Portable(trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, accumulate, c, ldc);
}

void GemmBf16A(bool trans_a, bool trans_b, int m, int n, int k, const uint16_t* a, int lda, const float* b, int ldb,
               const float* bias, bool accumulate, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
#if defined(__x86_64__)
  if (k > 0 && UseAmxBf16()) {
    GemmBf16Amx(trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, accumulate, c, ldc);
    return;
  }
#endif
  // Elsewhere: a as float32 (exact), which GemmBf16 rounds to the same values.
  const int rows = trans_a ? k : m, cols = trans_a ? m : k;
  std::vector<float> af(static_cast<size_t>(std::max(rows, 0)) * std::max(cols, 0));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const uint32_t bits = static_cast<uint32_t>(a[i * lda + j]) << 16;
      std::memcpy(&af[i * cols + j], &bits, sizeof(float));
    }
  }
  GemmBf16(trans_a, trans_b, m, n, k, af.data(), cols, b, ldb, bias, accumulate, c, ldc);
}

}  // namespace tnmt::kernels::cpu
