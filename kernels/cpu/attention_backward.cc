// Training attention (AttentionTrainForward, which saves the probabilities) and its gradient
// (AttentionBackward); see attention.h. Each (group, head) pair runs on one thread with tnmt's
// own small GEMM loops, so results do not depend on the thread count.
#include "kernels/cpu/attention.h"

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vec16.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/gemm_tiling.h"

namespace tnmt::kernels::cpu {

namespace {

// The small attention GEMMs' register tiles: 16 columns, and at most this many rows (AVX-512:
// 8 independent accumulators cover the FMA latency; AVX2: 12 ymm accumulators).
constexpr int kSmallW = 16;
constexpr int kSmallR = 4, kSmallRAvx2 = 6, kSmallRAvx512 = 8;

// The tiles of SmallGemmNN: c[R, w] (w <= kSmallW columns) = alpha * a[R, k] · b[k, w] (or c +=
// that); each element is the sum over p in order, started from zero, then times alpha.
TNMT_VECTORIZE void SmallTilePortable(int rows, int w, int k, float alpha, const float* a, int64_t lda,
                                      const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  float acc[kSmallR][kSmallW] = {};
  for (int p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    for (int r = 0; r < rows; ++r) {
      const float av = a[r * lda + p];
      for (int j = 0; j < w; ++j) acc[r][j] += av * bp[j];
    }
  }
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < w; ++j) c[r * ldc + j] = (accumulate ? c[r * ldc + j] : 0.0f) + alpha * acc[r][j];
  }
}

#if defined(__x86_64__)
// Full: all kSmallW columns (plain loads and stores), else the first w.
template <int R, bool Full>
TNMT_AVX512_TARGET void SmallTileAvx512(int w, int k, float alpha, const float* a, int64_t lda, const float* b,
                                        int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  const __mmask16 m = Full ? static_cast<__mmask16>(0xFFFF) : vec16::avx512::TailMask(w);
  __m512 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int p = 0; p < k; ++p) {
    const __m512 bv = Full ? _mm512_loadu_ps(b + p * ldb) : _mm512_maskz_loadu_ps(m, b + p * ldb);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + p]), bv, acc[r]);
  }
  const __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    __m512 x = _mm512_mul_ps(va, acc[r]);
    float* cr = c + r * ldc;
    if (Full) {
      if (accumulate) x = _mm512_add_ps(_mm512_loadu_ps(cr), x);
      _mm512_storeu_ps(cr, x);
    } else {
      if (accumulate) x = _mm512_add_ps(_mm512_maskz_loadu_ps(m, cr), x);
      _mm512_mask_storeu_ps(cr, m, x);
    }
  }
}

template <int R, bool Full>
TNMT_AVX2_TARGET void SmallTileAvx2(int w, int k, float alpha, const float* a, int64_t lda, const float* b,
                                    int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  // 12 accumulators, 2 loads and a broadcast fill the 16 ymm registers: the masks are made
  // where they are used, or the accumulators spill.
  __m256 lo[R], hi[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
#pragma GCC unroll 2
  for (int p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    __m256 bl, bh;
    if (Full) {
      bl = _mm256_loadu_ps(bp);
      bh = _mm256_loadu_ps(bp + 8);
    } else {
      bl = _mm256_maskload_ps(bp, vec16::avx2::LoMask(w));
      bh = _mm256_maskload_ps(bp + 8, vec16::avx2::HiMask(w));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + p);
      lo[r] = _mm256_fmadd_ps(av, bl, lo[r]);
      hi[r] = _mm256_fmadd_ps(av, bh, hi[r]);
    }
  }
  const __m256 va = _mm256_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    __m256 xl = _mm256_mul_ps(va, lo[r]), xh = _mm256_mul_ps(va, hi[r]);
    float* cr = c + r * ldc;
    if (accumulate) {
      xl = _mm256_add_ps(Full ? _mm256_loadu_ps(cr) : _mm256_maskload_ps(cr, vec16::avx2::LoMask(w)), xl);
      xh = _mm256_add_ps(Full ? _mm256_loadu_ps(cr + 8) : _mm256_maskload_ps(cr + 8, vec16::avx2::HiMask(w)), xh);
    }
    Avx2StoreFirst(cr, w, xl);
    Avx2StoreFirst(cr + 8, w - 8, xh);
  }
}

using SmallTileFn = void (*)(int, int, float, const float*, int64_t, const float*, int64_t, bool, float*, int64_t);

// kSmallTiles...[full][rows]: the tile kernel for `rows` rows (1..max), full width or not.
template <int... R>
constexpr std::array<std::array<SmallTileFn, sizeof...(R) + 1>, 2> MakeSmallTilesAvx512(
    std::integer_sequence<int, R...>) {
  return {{{nullptr, &SmallTileAvx512<R + 1, false>...}, {nullptr, &SmallTileAvx512<R + 1, true>...}}};
}
template <int... R>
constexpr std::array<std::array<SmallTileFn, sizeof...(R) + 1>, 2> MakeSmallTilesAvx2(
    std::integer_sequence<int, R...>) {
  return {{{nullptr, &SmallTileAvx2<R + 1, false>...}, {nullptr, &SmallTileAvx2<R + 1, true>...}}};
}
constexpr auto kSmallTilesAvx512 = MakeSmallTilesAvx512(std::make_integer_sequence<int, kSmallRAvx512>{});
constexpr auto kSmallTilesAvx2 = MakeSmallTilesAvx2(std::make_integer_sequence<int, kSmallRAvx2>{});
#endif

// c[m, n] = alpha * a[m, k] · b[k, n] (accumulate: c += that), all row-major with row strides,
// in register tiles of up to 8 (AVX-512), 6 (AVX2) or 4 rows times kSmallW columns. An element's
// value depends only on the operands and the instruction-set path, not on m, n or the thread
// that computes it.
void SmallGemmNN(int m, int n, int k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                 bool accumulate, float* c, int64_t ldc) {
  const bool avx512 = UseAvx512(), avx2 = !avx512 && UseAvx2();
  const int max_r = avx512 ? kSmallRAvx512 : avx2 ? kSmallRAvx2 : kSmallR;
  for (int i0 = 0; i0 < m; i0 += max_r) {
    const int rows = std::min(max_r, m - i0);
    for (int j0 = 0; j0 < n; j0 += kSmallW) {
      const int w = std::min(kSmallW, n - j0);
      const float* ta = a + i0 * lda;
      float* tc = c + i0 * ldc + j0;
#if defined(__x86_64__)
      if (avx512) {
        kSmallTilesAvx512[w == kSmallW][rows](w, k, alpha, ta, lda, b + j0, ldb, accumulate, tc, ldc);
        continue;
      }
      if (avx2) {
        kSmallTilesAvx2[w == kSmallW][rows](w, k, alpha, ta, lda, b + j0, ldb, accumulate, tc, ldc);
        continue;
      }
#endif
      SmallTilePortable(rows, w, k, alpha, ta, lda, b + j0, ldb, accumulate, tc, ldc);
    }
  }
}

// t[cols, rows] = x[rows, cols]^T (x with row stride ldx; t compact).
void Transpose(float* t, const float* x, int64_t ldx, int rows, int cols) {
  for (int j = 0; j < cols; ++j) {
    float* tj = t + static_cast<int64_t>(j) * rows;
    for (int i = 0; i < rows; ++i) tj[i] = x[i * ldx + j];
  }
}

// Per-thread scratch of the attention kernels (each (sentence, head) runs on one thread).
struct AttentionScratch {
  std::vector<float> t;      // a transposed K, V, probabilities or score gradients
  std::vector<float> probs;  // the dropped probabilities
  std::vector<float> ds;     // score gradients
};

AttentionScratch& ThreadAttentionScratch() {
  thread_local AttentionScratch s;
  return s;
}

// The probabilities that multiply v: p itself, or with attention dropout a copy in `scratch`
// dropped as elements [first, first + block) of the whole probs tensor.
const float* DroppedProbs(const float* p, int64_t block, int64_t first, const AttentionDropout& drop,
                          float* scratch) {
  if (drop.p <= 0.0f) return p;
  std::memcpy(scratch, p, sizeof(float) * block);
  DropoutBlock(scratch, block, static_cast<uint64_t>(first), drop.p, drop.seed, drop.stream);
  return scratch;
}

}  // namespace

void AttentionTrainForward(float* out, int64_t ld_out, float* probs, const float* q, int64_t ld_q,
                           const float* k, const float* v, int64_t ld_kv, int batch, int q_len,
                           int k_len, int heads, int d_head, const int32_t* k_valid, bool causal,
                           const AttentionDropout& drop) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_head));
  const int64_t block = static_cast<int64_t>(q_len) * k_len;
  // One (sentence, head) per index; each writes its own probs block and out columns.
  ParallelForLarge(static_cast<int64_t>(batch) * heads, 2 * block * d_head, [&](int64_t begin, int64_t end) {
    AttentionScratch& s = ThreadAttentionScratch();
    float* kt = GrowScratch(&s.t, static_cast<size_t>(d_head) * k_len);
    float* dropped = drop.p > 0.0f ? GrowScratch(&s.probs, static_cast<size_t>(block)) : nullptr;
    for (int64_t bh = begin; bh < end; ++bh) {
      const int b = static_cast<int>(bh / heads), h = static_cast<int>(bh % heads);
      const int valid = k_valid != nullptr ? k_valid[b] : k_len;
      const float* qb = q + static_cast<int64_t>(b) * q_len * ld_q + h * d_head;
      const float* kb = k + static_cast<int64_t>(b) * k_len * ld_kv + h * d_head;
      const float* vb = v + static_cast<int64_t>(b) * k_len * ld_kv + h * d_head;
      const int64_t first = bh * block;
      float* p = probs + first;
      // scores = scale * q k^T, through k^T [d_head, k_len]
      Transpose(kt, kb, ld_kv, k_len, d_head);
      SmallGemmNN(q_len, k_len, d_head, scale, qb, ld_q, kt, k_len, false, p, k_len);
      for (int i = 0; i < q_len; ++i) {
        float* row = p + static_cast<int64_t>(i) * k_len;
        const int limit = causal ? std::min(valid, i + 1) : valid;
        for (int j = limit; j < k_len; ++j) row[j] = -INFINITY;
      }
      Softmax(p, q_len, k_len);
      const float* pv = DroppedProbs(p, block, first, drop, dropped);
      SmallGemmNN(q_len, d_head, k_len, 1.0f, pv, k_len, vb, ld_kv, false,
                  out + static_cast<int64_t>(b) * q_len * ld_out + h * d_head, ld_out);
    }
  });
}

void AttentionBackward(float* dq, int64_t ld_dq, float* dk, float* dv, int64_t ld_dkv,
                       const float* dout, int64_t ld_dout, const float* probs, const float* q,
                       int64_t ld_q, const float* k, const float* v, int64_t ld_kv, int batch,
                       int q_len, int k_len, int heads, int d_head, const AttentionDropout& drop) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_head));
  const int64_t block = static_cast<int64_t>(q_len) * k_len;
  // One (sentence, head) per index: its dq, dk and dv columns of its rows are its own.
  ParallelForLarge(static_cast<int64_t>(batch) * heads, 4 * block * d_head, [&](int64_t begin, int64_t end) {
    AttentionScratch& s = ThreadAttentionScratch();
    float* t = GrowScratch(&s.t, static_cast<size_t>(std::max(d_head, q_len)) * k_len);
    float* ds = GrowScratch(&s.ds, static_cast<size_t>(block));
    float* dropped = drop.p > 0.0f ? GrowScratch(&s.probs, static_cast<size_t>(block)) : nullptr;
    for (int64_t bh = begin; bh < end; ++bh) {
      const int b = static_cast<int>(bh / heads), h = static_cast<int>(bh % heads);
      const int64_t qoff = static_cast<int64_t>(b) * q_len, koff = static_cast<int64_t>(b) * k_len;
      const int64_t first = bh * block;
      const float* p = probs + first;
      const float* dob = dout + qoff * ld_dout + h * d_head;
      const float* qb = q + qoff * ld_q + h * d_head;
      const float* kb = k + koff * ld_kv + h * d_head;
      const float* vb = v + koff * ld_kv + h * d_head;
      // dv += drop(p)^T dout
      const float* pv = DroppedProbs(p, block, first, drop, dropped);
      Transpose(t, pv, k_len, q_len, k_len);
      SmallGemmNN(k_len, d_head, q_len, 1.0f, t, q_len, dob, ld_dout, true, dv + koff * ld_dkv + h * d_head,
                  ld_dkv);
      // dp = drop'(dout v^T) (the same mask and scale), then ds = p * (dp - rowsum(dp * p))
      Transpose(t, vb, ld_kv, k_len, d_head);
      SmallGemmNN(q_len, k_len, d_head, 1.0f, dob, ld_dout, t, k_len, false, ds, k_len);
      DropoutBlock(ds, block, static_cast<uint64_t>(first), drop.p, drop.seed, drop.stream);
      for (int i = 0; i < q_len; ++i) {
        float* dsr = ds + static_cast<int64_t>(i) * k_len;
        const float* pr = p + static_cast<int64_t>(i) * k_len;
        float dot = 0.0f;
        for (int j = 0; j < k_len; ++j) dot += dsr[j] * pr[j];
        for (int j = 0; j < k_len; ++j) dsr[j] = pr[j] * (dsr[j] - dot);
      }
      // dq = scale * ds k ; dk += scale * ds^T q
      SmallGemmNN(q_len, d_head, k_len, scale, ds, k_len, kb, ld_kv, false, dq + qoff * ld_dq + h * d_head,
                  ld_dq);
      Transpose(t, ds, k_len, q_len, k_len);
      SmallGemmNN(k_len, d_head, q_len, scale, t, q_len, qb, ld_q, true, dk + koff * ld_dkv + h * d_head,
                  ld_dkv);
    }
  });
}

}  // namespace tnmt::kernels::cpu
