// int8 GEMM with a prepacked, quantized weight operand; see gemm.h (PackedMatrix::PackInt8,
// GemmPacked).
//
// Quantization (symmetric, no zero points, 7 bits on both sides):
//   weights      per output column j: s_w[j] = max_k |w[j,k]| / 63, q_w = rint(w / s_w) in
//                [-63, 63], once at pack time;
//   activations  per row i, on every call: s_a[i] = max_k |a[i,k]| / 63,
//                q_a = rint(a[i,k] * (63 / max)) in [-63, 63].
// Then c[i,j] = fma(float(sum_k q_a[i,k] q_w[j,k]), s_a[i] * s_w[j], init) with init =
// (c or 0) + (bias[j] or 0). The integer sum is exact on every path and the float epilogue is
// the same few operations, so the three kernels below give bit-identical results, and a row's
// result depends only on that row (not on the batch or on the thread count).
//
// Why 7 bits: the x86 byte dot products multiply an unsigned byte by a signed one, so
// activations are stored as u = q_a + 64 in [1, 127] and 64 * sum_k q_w[j,k] is subtracted at
// the end (stored per column at pack time). AVX2's vpmaddubsw adds two such products in a
// saturating 16-bit lane, at most 2 * 127 * 63 = 16002 in magnitude, so two groups' lanes
// can be added in 16 bits (32004 < 2^15) before vpmaddwd widens them: the AVX2 kernel spends
// three multiply instructions per 64 products (two vpmaddubsw, one vpmaddwd) where 8-bit
// activations need four, and computes the same integers as VNNI. (8-bit weights would need
// the activations' sign moved onto the weights first, a third instruction per pair that left
// AVX2 int8 no faster than float32.) On the earlier (small) demo model 7-bit activations
// scored as 8-bit ones did: test_2016_flickr BLEU 40.37 (8 bits: 40.32, float32 40.30), dev
// 41.41 (41.32, 41.49); on the current one int8 reads 42.21 against float32's 42.15.
//
// Layout: panels of 32 output columns; in a panel, k runs in groups of 4 (k padded with zero
// weights to a multiple of 4), each group 32 columns x 4 bytes = 128 bytes, column-major in
// the group: byte g*128 + 4j + r is w[col j][4g + r]. That is what one VNNI dot-product
// instruction consumes (16 columns x 4 k per zmm) and what the AVX2 kernel reads 8 columns at
// a time.
//
// Kernels (activations as q_a + 64 on the vector paths):
//   avx512 + AMX   tdpbusd on the tile registers: tiles of 16 rows x 16 columns x 64 k, two
//                  or four of them (up to 32 rows x 32 columns) per panel tile. A weight tile
//                  is 16 groups of the panel's 128-byte layout read with a 128-byte stride (16
//                  columns x 4 bytes per group), so AMX uses the same packed weights; k runs in
//                  steps of 64 (the activations' rows are zero-padded to a multiple of 64, so
//                  the weight rows read past the panel's last group, which the packing
//                  allocates, add nothing). Same integer sums and epilogue as VNNI.
//   avx512 + VNNI  vpdpbusd; tiles of up to 12 rows x 32 columns.
//   avx2           vpmaddubsw (x2) + vpaddw + vpmaddwd per two groups; tiles of up to 4 rows x
//                  16 columns. Also the path of AVX-512 CPUs without VNNI.
//   portable       plain integer loops on q_a.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/amx.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_tiling.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define TNMT_VNNI_TARGET \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512vnni,avx2,fma")))
#define TNMT_AVX2_TARGET __attribute__((target("avx2,fma")))
#define TNMT_AMX_TARGET                                                                 \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512vnni,avx2,fma,amx-tile," \
                        "amx-int8,amx-bf16")))
#endif

namespace tnmt::kernels::cpu {

namespace {

constexpr int kNr = 32;         // output columns per panel
constexpr int kGroupBytes = kNr * 4;
constexpr int kMaxMrVnni = 12;  // rows per register tile, VNNI kernel
constexpr int kMaxMrAvx2 = 4;   // rows per register tile, AVX2 kernel (16 columns)
constexpr int kMaxMrPortable = 8;
// Rows per thread from which the rows, not the panels, are split over the threads (blocks
// of kRowBlock rows); as gemm_packed.cc.
constexpr int kRowSplitMinRows = 96;
constexpr int kRowBlock = 1;

// Bytes the packing allocates past the last panel: what an AMX weight tile (16 groups of k, one
// per tile row) reads beyond it.
constexpr int kAmxOverread = kAmxBytes / 4 * kGroupBytes;

enum class Path { kPortable, kAvx2, kVnni, kAmx };

Path ActivePath() {
  if (UseAmxInt8()) return Path::kAmx;
  if (UseAvx512() && HasAvx512Vnni()) return Path::kVnni;
  if (UseAvx2()) return Path::kAvx2;
  return Path::kPortable;
}


// What the epilogue needs besides the integer sums.
struct Epilogue {
  const float* row_scale;   // s_a of the tile's first row
  const float* col_scale;   // s_w of the panel's first column
  const int32_t* col_comp;  // 64 * sum_k q_w (vector paths)
  const float* bias;        // of the panel's first column, or null
  bool accumulate;
  float* c;
  int64_t ldc;
  int nvalid;  // columns of the panel that exist
};

// Activations: q_a in [-kActLimit, kActLimit], stored as q_a + kActOffset on the vector paths.
constexpr int kActLimit = 63;
constexpr int kActOffset = 64;

// round(x * inv) clamped to [-limit, limit] (round half to even, the default rounding mode):
// limit kActLimit for activations (the default), 63 for weights (PackInt8).
inline int QuantizeOne(float x, float inv, float limit = static_cast<float>(kActLimit)) {
  return static_cast<int>(std::min(limit, std::max(-limit, std::nearbyint(x * inv))));
}

// Quantizes one row: q[0, kp) (k..kp zero-padded), returns s_a. `shift` stores q + kActOffset.
float QuantizeRowPortable(const float* a, int k, int kp, bool shift, int8_t* q) {
  float amax = 0.0f;
  for (int p = 0; p < k; ++p) amax = std::max(amax, std::fabs(a[p]));
  const int x = shift ? kActOffset : 0;
  if (!(amax > 0.0f) || !std::isfinite(amax)) {
    // All zero (or not finite: the float path would give NaN/inf too; zeros here).
    for (int p = 0; p < kp; ++p) q[p] = static_cast<int8_t>(x);
    return 0.0f;
  }
  const float inv = static_cast<float>(kActLimit) / amax;
  for (int p = 0; p < k; ++p) q[p] = static_cast<int8_t>(QuantizeOne(a[p], inv) + x);
  for (int p = k; p < kp; ++p) q[p] = static_cast<int8_t>(x);
  return amax / static_cast<float>(kActLimit);
}

#if defined(__x86_64__)

// QuantizeRowPortable with AVX-512, shift = true (same values: max is exact, a * inv is one rounding,
// cvtps rounds to nearest even like nearbyint in the default rounding mode).
TNMT_VNNI_TARGET float QuantizeRowAvx512(const float* a, int k, int kp, int8_t* q) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 vmax = _mm512_setzero_ps();
  int p = 0;
  for (; p + 16 <= k; p += 16) vmax = _mm512_max_ps(vmax, _mm512_andnot_ps(sign, _mm512_loadu_ps(a + p)));
  float amax = _mm512_reduce_max_ps(vmax);
  for (; p < k; ++p) amax = std::max(amax, std::fabs(a[p]));
  if (!(amax > 0.0f) || !std::isfinite(amax)) return QuantizeRowPortable(a, k, kp, /*shift=*/true, q);
  const float inv = static_cast<float>(kActLimit) / amax;
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512i lo = _mm512_set1_epi32(-kActLimit), hi = _mm512_set1_epi32(kActLimit);
  const __m128i x = _mm_set1_epi8(static_cast<char>(kActOffset));
  for (p = 0; p + 16 <= k; p += 16) {
    __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(a + p), vinv));
    v = _mm512_min_epi32(_mm512_max_epi32(v, lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + p), _mm_add_epi8(_mm512_cvtepi32_epi8(v), x));
  }
  for (; p < k; ++p) q[p] = static_cast<int8_t>(QuantizeOne(a[p], inv) + kActOffset);
  for (; p < kp; ++p) q[p] = static_cast<int8_t>(kActOffset);
  return amax / static_cast<float>(kActLimit);
}

// QuantizeRowPortable with AVX2, shift = true.
TNMT_AVX2_TARGET float QuantizeRowAvx2(const float* a, int k, int kp, int8_t* q) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 vmax = _mm256_setzero_ps();
  int p = 0;
  for (; p + 8 <= k; p += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(a + p)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float amax = 0.0f;
  for (float l : lanes) amax = std::max(amax, l);
  for (; p < k; ++p) amax = std::max(amax, std::fabs(a[p]));
  if (!(amax > 0.0f) || !std::isfinite(amax)) return QuantizeRowPortable(a, k, kp, /*shift=*/true, q);
  const float inv = static_cast<float>(kActLimit) / amax;
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i lo = _mm256_set1_epi32(-kActLimit), hi = _mm256_set1_epi32(kActLimit);
  const __m128i x = _mm_set1_epi8(static_cast<char>(kActOffset));
  for (p = 0; p + 8 <= k; p += 8) {
    __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(a + p), vinv));
    v = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
    // 8 int32 -> 8 int8 (values fit, so the saturating packs are exact).
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + p), _mm_add_epi8(_mm_packs_epi16(w, w), x));
  }
  for (; p < k; ++p) q[p] = static_cast<int8_t>(QuantizeOne(a[p], inv) + kActOffset);
  for (; p < kp; ++p) q[p] = static_cast<int8_t>(kActOffset);
  return amax / static_cast<float>(kActLimit);
}

// The AVX-512 epilogue (VNNI and AMX kernels): a panel's per-column constants, then each row
// of the tile from its integer sums (acc0: the panel's columns 0-15, acc1: 16-31).
struct PanelConstants512 {
  __mmask16 m0, m1;
  __m512i comp0, comp1;
  __m512 s0, s1, bias0, bias1;
};

TNMT_VNNI_TARGET inline PanelConstants512 LoadPanelConstants512(const Epilogue& e) {
  PanelConstants512 pc;
  pc.m0 = e.nvalid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << e.nvalid) - 1);
  pc.m1 = e.nvalid >= 32   ? 0xFFFF
          : e.nvalid <= 16 ? 0
                           : static_cast<__mmask16>((1u << (e.nvalid - 16)) - 1);
  pc.comp0 = _mm512_loadu_si512(e.col_comp);
  pc.comp1 = _mm512_loadu_si512(e.col_comp + 16);
  pc.s0 = _mm512_loadu_ps(e.col_scale);
  pc.s1 = _mm512_loadu_ps(e.col_scale + 16);
  pc.bias0 = e.bias ? _mm512_maskz_loadu_ps(pc.m0, e.bias) : _mm512_setzero_ps();
  pc.bias1 = e.bias ? _mm512_maskz_loadu_ps(pc.m1, e.bias + 16) : _mm512_setzero_ps();
  return pc;
}

TNMT_VNNI_TARGET inline void StoreRow512(const Epilogue& e, const PanelConstants512& pc, int i, __m512i acc0,
                                         __m512i acc1) {
  float* ci = e.c + i * e.ldc;
  const __m512 ra = _mm512_set1_ps(e.row_scale[i]);
  const __m512 init0 =
      _mm512_add_ps(e.accumulate ? _mm512_maskz_loadu_ps(pc.m0, ci) : _mm512_setzero_ps(), pc.bias0);
  const __m512 init1 =
      _mm512_add_ps(e.accumulate ? _mm512_maskz_loadu_ps(pc.m1, ci + 16) : _mm512_setzero_ps(), pc.bias1);
  const __m512 v0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc0, pc.comp0)),
                                    _mm512_mul_ps(ra, pc.s0), init0);
  const __m512 v1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc1, pc.comp1)),
                                    _mm512_mul_ps(ra, pc.s1), init1);
  _mm512_mask_storeu_ps(ci, pc.m0, v0);
  _mm512_mask_storeu_ps(ci + 16, pc.m1, v1);
}

// VNNI: c[MR, 32 of the panel] from a (MR rows of kp bytes, stride kp, q_a + 64) and the
// panel b (groups x 128 bytes).
template <int MR>
TNMT_VNNI_TARGET void KernelVnni(int groups, const int8_t* a, int64_t lda, const int8_t* b,
                                 const Epilogue& e) {
  __m512i c0[MR], c1[MR];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_si512();
  for (int g = 0; g < groups; ++g) {
    const __m512i b0 = _mm512_load_si512(b);
    const __m512i b1 = _mm512_load_si512(b + 64);
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      int32_t word;
      std::memcpy(&word, a + i * lda + 4 * g, 4);
      const __m512i ai = _mm512_set1_epi32(word);
      // Written as asm: GCC 12 copies the accumulator around _mm512_dpbusd_epi32 (and then
      // spills the tile), which halves the kernel's speed.
      asm("vpdpbusd %[b], %[a], %[c]" : [c] "+v"(c0[i]) : [a] "v"(ai), [b] "v"(b0));
      asm("vpdpbusd %[b], %[a], %[c]" : [c] "+v"(c1[i]) : [a] "v"(ai), [b] "v"(b1));
    }
    b += kGroupBytes;
  }
  const PanelConstants512 pc = LoadPanelConstants512(e);
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) StoreRow512(e, pc, i, c0[i], c1[i]);
}

using KernelFn = void (*)(int, const int8_t*, int64_t, const int8_t*, const Epilogue&);

template <int... MR>
constexpr std::array<KernelFn, sizeof...(MR) + 1> MakeVnni(std::integer_sequence<int, MR...>) {
  return {nullptr, &KernelVnni<MR + 1>...};
}
constexpr auto kVnni = MakeVnni(std::make_integer_sequence<int, kMaxMrVnni>{});

// AMX: c[mr, 32 of the panel] for mr <= 32, from a (q_a + 64, rows of lda bytes, k zero-padded
// to chunks * 64 bytes; 16 rows, or 32 when mr > 16, readable) and the panel b.
TNMT_AMX_TARGET void KernelAmx(int mr, int chunks, const int8_t* a, int64_t lda, const int8_t* b,
                               const Epilogue& e) {
  const bool two = mr > kAmxRows;
  AmxZeroSums(two);
  AmxTileProduct<AmxDot::kInt8>(chunks, reinterpret_cast<const char*>(a), lda, kAmxRows * lda, kAmxBytes,
                                reinterpret_cast<const char*>(b), kGroupBytes, kAmxBytes,
                                (kAmxBytes / 4) * kGroupBytes, two);
  alignas(64) int32_t acc[2 * kAmxRows][kNr];
  AmxStoreSums(acc, kNr * sizeof(int32_t), two);
  const PanelConstants512 pc = LoadPanelConstants512(e);
  for (int i = 0; i < mr; ++i) {
    StoreRow512(e, pc, i, _mm512_load_si512(&acc[i][0]), _mm512_load_si512(&acc[i][16]));
  }
}


// One row of the AVX2 kernel for one group of 4 k: pairs of u7 x s7 products (at most
// 2 * 127 * 63 in magnitude: no saturation), pairs of those to 32 bits, added to the row's
// accumulators of the two 8-column blocks.
TNMT_AVX2_TARGET inline void Avx2Row(const int8_t* a, __m256i b0, __m256i b1, __m256i ones,
                                     __m256i& acc0, __m256i& acc1) {
  int32_t word;
  std::memcpy(&word, a, 4);
  const __m256i ai = _mm256_set1_epi32(word);
  acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_maddubs_epi16(ai, b0), ones));
  acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_maddubs_epi16(ai, b1), ones));
}

// One row for two groups (8 k): the two groups' 16-bit pair sums are added in 16 bits first
// (at most 4 * 127 * 63 = 32004 in magnitude: exact), then widened once.
TNMT_AVX2_TARGET inline void Avx2Row2(const int8_t* a, __m256i b0, __m256i b1, __m256i b2,
                                      __m256i b3, __m256i ones, __m256i& acc0, __m256i& acc1) {
  int32_t w0, w1;
  std::memcpy(&w0, a, 4);
  std::memcpy(&w1, a + 4, 4);
  const __m256i a0 = _mm256_set1_epi32(w0), a1 = _mm256_set1_epi32(w1);
  const __m256i s0 = _mm256_add_epi16(_mm256_maddubs_epi16(a0, b0), _mm256_maddubs_epi16(a1, b2));
  const __m256i s1 = _mm256_add_epi16(_mm256_maddubs_epi16(a0, b1), _mm256_maddubs_epi16(a1, b3));
  acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(s0, ones));
  acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(s1, ones));
}

// AVX2: c[MR, 16 columns of the panel starting at 16 * half] from a (q_a + 64) and the
// panel (e describes the whole panel; the half's columns are bytes [64 half, 64 half + 64) of
// each 128-byte group). Groups are taken in pairs (Avx2Row2), the last one alone when their
// number is odd.
template <int MR>
TNMT_AVX2_TARGET void KernelAvx2(int groups, const int8_t* a, int64_t lda, const int8_t* b,
                                 const Epilogue& e, int half) {
  const int nvalid = e.nvalid - 16 * half;
  const float* col_scale = e.col_scale + 16 * half;
  const int32_t* col_comp = e.col_comp + 16 * half;
  const float* bias = e.bias != nullptr ? e.bias + 16 * half : nullptr;
  float* c = e.c + 16 * half;
  b += 64 * half;
  // Accumulators as named variables, not arrays: GCC keeps arrays of them in memory here
  // (spilling and copying them in the inner loop).
  static_assert(MR >= 1 && MR <= 4, "AVX2 int8 tiles have 1 to 4 rows");
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
          c30 = c00, c31 = c00;
  const __m256i ones = _mm256_set1_epi16(1);
  const int pairs = groups / 2;
  if constexpr (MR == 4) {
    if (pairs > 0) {
      // The hot tile as asm: GCC copies the accumulators around the intrinsics each iteration
      // and stores one of them (as KernelVnni explains). Per row: the two groups' activations
      // broadcast, the first group's weights from registers, the second's from memory.
      const int8_t* a0 = a;
      const int8_t* a3 = a + 3 * lda;
      const int8_t* bp = b;
      int64_t g = pairs;
      // Scratch registers named outright (clobbered), as operands they would exceed asm's 30.
#define TNMT_AVX2_INT8_ROW(A_LO, A_HI, C0, C1)          \
  "vpbroadcastd " A_LO ", %%ymm12\n\t"                  \
  "vpbroadcastd " A_HI ", %%ymm13\n\t"                  \
  "vpmaddubsw %%ymm10, %%ymm12, %%ymm14\n\t"            \
  "vpmaddubsw 128(%[b]), %%ymm13, %%ymm15\n\t"          \
  "vpaddw %%ymm15, %%ymm14, %%ymm14\n\t"                \
  "vpmaddwd %[ones], %%ymm14, %%ymm14\n\t"              \
  "vpaddd %%ymm14, %[" C0 "], %[" C0 "]\n\t"            \
  "vpmaddubsw %%ymm11, %%ymm12, %%ymm14\n\t"            \
  "vpmaddubsw 160(%[b]), %%ymm13, %%ymm15\n\t"          \
  "vpaddw %%ymm15, %%ymm14, %%ymm14\n\t"                \
  "vpmaddwd %[ones], %%ymm14, %%ymm14\n\t"              \
  "vpaddd %%ymm14, %[" C1 "], %[" C1 "]\n\t"
      asm volatile(
          "1:\n\t"
          "vmovdqa (%[b]), %%ymm10\n\t"
          "vmovdqa 32(%[b]), %%ymm11\n\t"
          TNMT_AVX2_INT8_ROW("(%[a0])", "4(%[a0])", "c00", "c01")
          TNMT_AVX2_INT8_ROW("(%[a0],%[lda],1)", "4(%[a0],%[lda],1)", "c10", "c11")
          TNMT_AVX2_INT8_ROW("(%[a0],%[lda],2)", "4(%[a0],%[lda],2)", "c20", "c21")
          TNMT_AVX2_INT8_ROW("(%[a3])", "4(%[a3])", "c30", "c31")
          "add $8, %[a0]\n\t"
          "add $8, %[a3]\n\t"
          "add $256, %[b]\n\t"
          "dec %[g]\n\t"
          "jnz 1b"
          : [c00] "+x"(c00), [c01] "+x"(c01), [c10] "+x"(c10), [c11] "+x"(c11), [c20] "+x"(c20),
            [c21] "+x"(c21), [c30] "+x"(c30), [c31] "+x"(c31), [a0] "+r"(a0), [a3] "+r"(a3),
            [b] "+r"(bp), [g] "+r"(g)
          : [lda] "r"(lda), [ones] "x"(ones)
          : "cc", "memory", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
#undef TNMT_AVX2_INT8_ROW
      static_assert(kGroupBytes == 128, "the asm steps b by 128 bytes per group");
    }
  } else {
    for (int g = 0; g < 2 * pairs; g += 2) {
      const int8_t* bg = b + static_cast<int64_t>(g) * kGroupBytes;
      const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(bg));
      const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(bg + 32));
      const __m256i b2 = _mm256_load_si256(reinterpret_cast<const __m256i*>(bg + kGroupBytes));
      const __m256i b3 = _mm256_load_si256(reinterpret_cast<const __m256i*>(bg + kGroupBytes + 32));
      const int8_t* ag = a + 4 * g;
      Avx2Row2(ag, b0, b1, b2, b3, ones, c00, c01);
      if constexpr (MR > 1) Avx2Row2(ag + lda, b0, b1, b2, b3, ones, c10, c11);
      if constexpr (MR > 2) Avx2Row2(ag + 2 * lda, b0, b1, b2, b3, ones, c20, c21);
    }
  }
  if (groups % 2 != 0) {  // the last group alone
    const int g = groups - 1;
    const int8_t* bg = b + static_cast<int64_t>(g) * kGroupBytes;
    const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(bg));
    const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(bg + 32));
    const int8_t* ag = a + 4 * g;
    Avx2Row(ag, b0, b1, ones, c00, c01);
    if constexpr (MR > 1) Avx2Row(ag + lda, b0, b1, ones, c10, c11);
    if constexpr (MR > 2) Avx2Row(ag + 2 * lda, b0, b1, ones, c20, c21);
    if constexpr (MR > 3) Avx2Row(ag + 3 * lda, b0, b1, ones, c30, c31);
  }
  const __m256i c0[4] = {c00, c10, c20, c30}, c1[4] = {c01, c11, c21, c31};
  const int valid0 = std::min(nvalid, 8), valid1 = std::max(0, std::min(nvalid - 8, 8));
  const __m256i m0 = Avx2LaneMask(valid0), m1 = Avx2LaneMask(valid1);
  const __m256i comp0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(col_comp));
  const __m256i comp1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(col_comp + 8));
  const __m256 s0 = _mm256_loadu_ps(col_scale), s1 = _mm256_loadu_ps(col_scale + 8);
  const __m256 bias0 = bias ? _mm256_maskload_ps(bias, m0) : _mm256_setzero_ps();
  const __m256 bias1 = bias ? _mm256_maskload_ps(bias + 8, m1) : _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    float* ci = c + i * e.ldc;
    const __m256 ra = _mm256_set1_ps(e.row_scale[i]);
    const __m256 init0 = _mm256_add_ps(e.accumulate ? _mm256_maskload_ps(ci, m0) : _mm256_setzero_ps(), bias0);
    const __m256 init1 = _mm256_add_ps(e.accumulate ? _mm256_maskload_ps(ci + 8, m1) : _mm256_setzero_ps(), bias1);
    Avx2StoreFirst(ci, valid0, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(c0[i], comp0)), _mm256_mul_ps(ra, s0), init0));
    Avx2StoreFirst(ci + 8, valid1, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(c1[i], comp1)), _mm256_mul_ps(ra, s1), init1));
  }
}

using KernelAvx2Fn = void (*)(int, const int8_t*, int64_t, const int8_t*, const Epilogue&, int);

template <int... MR>
constexpr std::array<KernelAvx2Fn, sizeof...(MR) + 1> MakeAvx2(std::integer_sequence<int, MR...>) {
  return {nullptr, &KernelAvx2<MR + 1>...};
}
constexpr auto kAvx2 = MakeAvx2(std::make_integer_sequence<int, kMaxMrAvx2>{});

#endif  // __x86_64__

// Portable: the same sums and epilogue with scalar code.
void KernelPortable(int mr, int groups, const int8_t* a, int64_t lda, const int8_t* b,
                    const Epilogue& e) {
  int32_t acc[kMaxMrPortable][kNr] = {};
  for (int g = 0; g < groups; ++g) {
    const int8_t* bg = b + static_cast<int64_t>(g) * kGroupBytes;
    for (int i = 0; i < mr; ++i) {
      const int8_t* ai = a + i * lda + 4 * g;
      for (int j = 0; j < kNr; ++j) {
        const int8_t* bj = bg + 4 * j;
        acc[i][j] += ai[0] * bj[0] + ai[1] * bj[1] + ai[2] * bj[2] + ai[3] * bj[3];
      }
    }
  }
  for (int i = 0; i < mr; ++i) {
    float* ci = e.c + i * e.ldc;
    for (int j = 0; j < e.nvalid; ++j) {
      const float init = (e.accumulate ? ci[j] : 0.0f) + (e.bias ? e.bias[j] : 0.0f);
      ci[j] = std::fma(static_cast<float>(acc[i][j]), e.row_scale[i] * e.col_scale[j], init);
    }
  }
}

}  // namespace

// The quantized weights of PackedMatrix::PackInt8.
struct PackedInt8 {
  int8_t* panels = nullptr;  // panels x groups x 128 bytes, 64-byte aligned
  std::vector<float> scale;  // s_w per column, padded to whole panels with 0
  std::vector<int32_t> comp; // 64 * sum_k q_w per column, padded with 0 (vector paths)
  int kp = 0;                // k rounded up to a multiple of 4
  ~PackedInt8() { std::free(panels); }
};

int64_t PackedInt8Bytes(const PackedInt8& p, int n) {
  const int64_t panels = (n + kNr - 1) / kNr;
  return panels * kNr * p.kp + static_cast<int64_t>(p.scale.size()) * 4 + static_cast<int64_t>(p.comp.size()) * 4;
}

PackedMatrix PackedMatrix::PackInt8(int n, int k, const float* b, int ldb) {
  PackedMatrix out;
  if (n <= 0 || k <= 0) return out;
  auto q = std::make_shared<PackedInt8>();
  const int panels = (n + kNr - 1) / kNr;
  q->kp = RoundUp(k, 4);
  const int groups = q->kp / 4;
  const size_t bytes = static_cast<size_t>(panels) * kNr * q->kp;
  // Zeros past the last panel: what an AMX weight tile of its last chunk of k reads.
  const size_t allocated = (bytes + kAmxOverread + 63) / 64 * 64;
  q->panels = static_cast<int8_t*>(std::aligned_alloc(64, allocated));
  if (q->panels == nullptr) return out;
  std::memset(q->panels, 0, allocated);
  q->scale.assign(static_cast<size_t>(panels) * kNr, 0.0f);
  q->comp.assign(static_cast<size_t>(panels) * kNr, 0);
  for (int col = 0; col < n; ++col) {
    const float* w = b + static_cast<int64_t>(col) * ldb;
    float amax = 0.0f;
    for (int p = 0; p < k; ++p) amax = std::max(amax, std::fabs(w[p]));
    if (!(amax > 0.0f) || !std::isfinite(amax)) continue;  // an all-zero column stays zero
    const float inv = 63.0f / amax;
    q->scale[col] = amax / 63.0f;
    int8_t* panel = q->panels + static_cast<int64_t>(col / kNr) * groups * kGroupBytes;
    const int j = col % kNr;
    int32_t sum = 0;
    for (int p = 0; p < k; ++p) {
      const int v = QuantizeOne(w[p], inv, 63.0f);
      panel[static_cast<int64_t>(p / 4) * kGroupBytes + 4 * j + p % 4] = static_cast<int8_t>(v);
      sum += v;
    }
    q->comp[col] = kActOffset * sum;
  }
  out.int8_ = std::move(q);
  out.n_ = n;
  out.k_ = k;
  return out;
}

void GemmPackedInt8(int m, const float* a, int lda, const PackedMatrix& b, const float* bias,
                    bool accumulate, float* c, int ldc) {
  const PackedInt8& w = *b.int8_data();
  const int n = b.n(), k = b.k(), kp = w.kp, groups = kp / 4;
  if (m <= 0 || n <= 0) return;
  const int panels = (n + kNr - 1) / kNr;
  const Path path = ActivePath();
  const bool amx = path == Path::kAmx;
  const int max_mr = path == Path::kVnni ? kMaxMrVnni : path == Path::kAvx2 ? kMaxMrAvx2 : kMaxMrPortable;
  // Bytes per quantized row: kp, or on AMX whole chunks of 64 (zeros past kp). AMX also reads
  // up to 16 rows past a block's last row: the scratch has pad_rows zero rows after them.
  const int qstride = amx ? RoundUp(kp, kAmxBytes) : kp;
  const int pad_rows = amx ? kAmxRows : 0;
  // Quantizes rows [r_begin, r_end) of a into qa/sa (indexed from r_begin), then zeroes the
  // pad rows after them.
  auto quantize = [&](int r_begin, int r_end, int8_t* qa, float* sa) {
    for (int i = r_begin; i < r_end; ++i) {
      const float* row = a + static_cast<int64_t>(i) * lda;
      int8_t* q = qa + static_cast<int64_t>(i - r_begin) * qstride;
      float* s = sa + (i - r_begin);
#if defined(__x86_64__)
      if (path == Path::kVnni || amx) {
        *s = QuantizeRowAvx512(row, k, kp, q);
        if (qstride > kp) std::memset(q + kp, 0, qstride - kp);
        continue;
      }
      if (path == Path::kAvx2) {
        *s = QuantizeRowAvx2(row, k, kp, q);
        continue;
      }
#endif
      *s = QuantizeRowPortable(row, k, kp, /*shift=*/false, q);
    }
    std::memset(qa + static_cast<int64_t>(r_end - r_begin) * qstride, 0, static_cast<size_t>(pad_rows) * qstride);
  };
  // Rows [r_begin, r_end) (quantized at pa/psa) times panels [p_begin, p_end).
  auto compute = [&](int r_begin, int r_end, int64_t p_begin, int64_t p_end, const int8_t* pa, const float* psa) {
    const int rows = r_end - r_begin;
    const Tiling tiling(rows, max_mr);
    // AMX: tiles of kAmxTileRows rows, the last one shorter.
    const int tiles = amx ? (rows + kAmxTileRows - 1) / kAmxTileRows : tiling.tiles;
    // The thread's next panel is prefetched into L2 in slices, one slice before each tile of
    // this one, so that its first tile does not wait on memory (as gemm_packed.cc).
    const int panel_lines = groups * kGroupBytes / 64;
    const int slice = (panel_lines + tiles - 1) / tiles;
#if defined(__x86_64__)
    if (amx) AmxBegin();
#endif
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int col = static_cast<int>(p) * kNr;
      const int8_t* pb = w.panels + p * groups * kGroupBytes;
      const char* next = p + 1 < p_end ? reinterpret_cast<const char*>(pb + groups * kGroupBytes) : nullptr;
      for (int t = 0; t < tiles; ++t) {
        const int r0 = amx ? t * kAmxTileRows : tiling.start(t);
        const int mr = amx ? std::min(kAmxTileRows, rows - r0) : tiling.rows(t);
#if defined(__x86_64__)
        if (next != nullptr) {
          for (int l = t * slice, end = std::min(panel_lines, l + slice); l < end; ++l) {
            _mm_prefetch(next + 64 * l, _MM_HINT_T1);
          }
        }
#endif
        const int8_t* ta = pa + static_cast<int64_t>(r0) * qstride;
        Epilogue e{psa + r0, w.scale.data() + col, w.comp.data() + col,
                   bias != nullptr ? bias + col : nullptr, accumulate,
                   c + static_cast<int64_t>(r_begin + r0) * ldc + col, ldc, std::min(kNr, n - col)};
#if defined(__x86_64__)
        if (amx) {
          KernelAmx(mr, qstride / kAmxBytes, ta, qstride, pb, e);
          continue;
        }
        if (path == Path::kVnni) {
          kVnni[mr](groups, ta, kp, pb, e);
          continue;
        }
        if (path == Path::kAvx2) {
          kAvx2[mr](groups, ta, kp, pb, e, 0);
          if (e.nvalid > 16) kAvx2[mr](groups, ta, kp, pb, e, 1);
          continue;
        }
#endif
        KernelPortable(mr, groups, ta, kp, pb, e);
      }
    }
#if defined(__x86_64__)
    if (amx) AmxEnd();
#endif
  };
  const int threads = ComputeThreads();
  if (threads > 1 && m >= kRowSplitMinRows * threads) {
    // Many rows: each thread quantizes and computes its own rows against every panel (the
    // same integers and epilogue per element as below).
    const int64_t blocks = (m + kRowBlock - 1) / kRowBlock;
    ParallelFor(blocks, [&](int64_t b_begin, int64_t b_end) {
      thread_local std::vector<int8_t> qa;
      thread_local std::vector<float> sa;
      const int r_begin = static_cast<int>(b_begin * kRowBlock);
      const int r_end = static_cast<int>(std::min<int64_t>(m, b_end * kRowBlock));
      int8_t* q = GrowScratch(&qa, static_cast<size_t>(r_end - r_begin + pad_rows) * qstride);
      float* s = GrowScratch(&sa, static_cast<size_t>(r_end - r_begin));
      quantize(r_begin, r_end, q, s);
      compute(r_begin, r_end, 0, panels, q, s);
    });
    return;
  }
  // Activations, quantized per call by the calling thread; read by every compute thread.
  thread_local std::vector<int8_t> qa;
  thread_local std::vector<float> sa;
  int8_t* q = GrowScratch(&qa, static_cast<size_t>(m + pad_rows) * qstride);
  float* s = GrowScratch(&sa, static_cast<size_t>(m));
  quantize(0, m, q, s);
  const int8_t* pa = q;  // (thread_locals: the workers must not name them)
  const float* psa = s;
  ParallelFor(panels, [&](int64_t p_begin, int64_t p_end) { compute(0, m, p_begin, p_end, pa, psa); });
}

}  // namespace tnmt::kernels::cpu
