// Training kernels; see backward.h.
#include "kernels/cpu/backward.h"

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vec16.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/gemm_tiling.h"

namespace tnmt::kernels::cpu {

namespace {

// Columns per parallel chunk of the column reductions (a cache line of floats, or more).
constexpr int kColumnBlock = 16;

// fn(column_begin, column_end) over blocks of the n columns of a [rows, n] reduction, in
// parallel when large enough; each column stays with one thread, summed over the rows in order.
void ForColumnBlocks(int64_t n, int64_t rows, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t blocks = (n + kColumnBlock - 1) / kColumnBlock;
  ParallelForLarge(blocks, rows * kColumnBlock, [&](int64_t begin, int64_t end) {
    fn(begin * kColumnBlock, std::min(n, end * kColumnBlock));
  });
}

// Rows [begin, end) of LayerNormBackward's dx (which may alias dy). The row's two sums run
// over 16 lanes (lane l adds the terms of columns l, l + 16, ... in order), then lanes are
// added in a fixed order: a row's result depends on nothing but the row, and a serial sum's
// chain of dependent adds does not bound the loop.
TNMT_VECTORIZE void LayerNormBackwardRows(float* dx, const float* mean_rstd, const float* dy, const float* x,
                                          const float* gamma, int64_t begin, int64_t end, int d) {
  constexpr int kLanes = 16;
  const int whole = d / kLanes * kLanes;
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    float* dxr = dx + r * d;
    const float mean = mean_rstd[2 * r], rstd = mean_rstd[2 * r + 1];
    float sum_g[kLanes] = {}, sum_gx[kLanes] = {};
    for (int j0 = 0; j0 < whole; j0 += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const float xhat = (xr[j0 + l] - mean) * rstd;
        const float g = dyr[j0 + l] * gamma[j0 + l];
        sum_g[l] += g;
        sum_gx[l] += g * xhat;
      }
    }
    for (int j = whole; j < d; ++j) {
      const float xhat = (xr[j] - mean) * rstd;
      const float g = dyr[j] * gamma[j];
      sum_g[j - whole] += g;
      sum_gx[j - whole] += g * xhat;
    }
    float mean_g = 0.0f, mean_gx = 0.0f;
    for (int l = 0; l < kLanes; ++l) {
      mean_g += sum_g[l];
      mean_gx += sum_gx[l];
    }
    mean_g /= d;
    mean_gx /= d;
    for (int j = 0; j < d; ++j) {
      const float xhat = (xr[j] - mean) * rstd;
      dxr[j] = rstd * (dyr[j] * gamma[j] - mean_g - xhat * mean_gx);
    }
  }
}

// Columns [begin, end) of dgamma and dbeta, each summed over the rows in order.
TNMT_VECTORIZE void LayerNormBackwardColumns(float* dgamma, float* dbeta, const float* mean_rstd, const float* dy,
                                             const float* x, int64_t rows, int d, int64_t begin, int64_t end) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    const float mean = mean_rstd[2 * r], rstd = mean_rstd[2 * r + 1];
    for (int64_t j = begin; j < end; ++j) {
      dgamma[j] += dyr[j] * ((xr[j] - mean) * rstd);
      dbeta[j] += dyr[j];
    }
  }
}

TNMT_VECTORIZE void ColumnSumRange(float* db, const float* dy, int64_t rows, int n, int64_t begin, int64_t end) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = dy + r * n;
    for (int64_t j = begin; j < end; ++j) db[j] += row[j];
  }
}

}  // namespace

// Row statistics (the forward's own), then dgamma and dbeta by column blocks (each column
// summed over the rows in order), then dx by rows, each step in parallel: the results do not
// depend on the thread count, and dy is read for the parameter gradients before dx (which may
// alias it) is written.
void LayerNormBackward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x, const float* gamma,
                       int64_t rows, int d, float eps) {
  if (rows <= 0 || d <= 0) return;
  std::vector<float> mean_rstd(2 * static_cast<size_t>(rows));
  LayerNormStats(mean_rstd.data(), x, rows, d, eps);  // those the forward pass normalized with
  ForColumnBlocks(d, rows, [&](int64_t begin, int64_t end) {
    LayerNormBackwardColumns(dgamma, dbeta, mean_rstd.data(), dy, x, rows, d, begin, end);
  });
  ParallelForLarge(rows, d, [&](int64_t begin, int64_t end) {
    LayerNormBackwardRows(dx, mean_rstd.data(), dy, x, gamma, begin, end, d);
  });
}

namespace {

TNMT_VECTORIZE void ActivationBackwardRange(float* dx, const float* dy, const float* pre, int64_t begin,
                                            int64_t end, Activation act) {
  if (act == Activation::kRelu) {
    for (int64_t i = begin; i < end; ++i) dx[i] = pre[i] > 0.0f ? dy[i] : 0.0f;
    return;
  }
  if (act == Activation::kSwish) {  // d/dx x s(x) = s + x s (1 - s)
    for (int64_t i = begin; i < end; ++i) {
      const float x = pre[i];
      const float s = 1.0f / (1.0f + std::exp(-x));
      dx[i] = dy[i] * (s + x * s * (1.0f - s));
    }
    return;
  }
  if (act == Activation::kGeluErf) {  // d/dx x Phi(x) = Phi(x) + x phi(x)
    constexpr float kInvSqrt2 = 0.7071067811865476f, kInvSqrt2Pi = 0.3989422804014327f;
    for (int64_t i = begin; i < end; ++i) {
      const float x = pre[i];
      dx[i] = dy[i] * (0.5f * (1.0f + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5f * x * x));
    }
    return;
  }
  constexpr float kC = 0.7978845608028654f;
  for (int64_t i = begin; i < end; ++i) {
    const float x = pre[i];
    const float u = kC * (x + 0.044715f * x * x * x);
    const float t = std::tanh(u);
    const float du = kC * (1.0f + 3.0f * 0.044715f * x * x);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
}

}  // namespace

void ActivationBackward(float* dx, const float* dy, const float* pre, int64_t count, Activation act) {
  ParallelFor(count, [&](int64_t begin, int64_t end) { ActivationBackwardRange(dx, dy, pre, begin, end, act); });
}

void AccumulateColumnSum(float* db, const float* dy, int64_t rows, int n) {
  ForColumnBlocks(n, rows, [&](int64_t begin, int64_t end) { ColumnSumRange(db, dy, rows, n, begin, end); });
}

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

void EmbeddingBackward(float* dtable, float* dpos, const float* dx, const int32_t* ids,
                       const int32_t* positions, int64_t count, int d, float scale) {
  for (int64_t i = 0; i < count; ++i) {
    const float* g = dx + i * d;
    float* e = dtable + static_cast<int64_t>(ids[i]) * d;
    for (int j = 0; j < d; ++j) e[j] += scale * g[j];
    if (dpos != nullptr) {
      float* p = dpos + static_cast<int64_t>(positions[i]) * d;
      for (int j = 0; j < d; ++j) p[j] += g[j];
    }
  }
}

namespace {

// A row's smoothed loss and NLL from its logit sum, target and pad logits and log-sum-exp:
// sum over non-pad tokens of log p = sum_x - x_pad - (V - 1) * lse, and
// loss = -(on - off) * logp_t - off * sum_logp (the target counted in sum_logp with weight off).
inline void RowLoss(float sum_x, float x_t, float x_pad, float lse, int vocab, double on, double off, double* loss,
                    double* nll) {
  const double sum_logp = static_cast<double>(sum_x) - x_pad - static_cast<double>(vocab - 1) * lse;
  const double logp_t = static_cast<double>(x_t) - lse;
  *loss = -(on - off) * logp_t - off * sum_logp;
  *nll = -logp_t;
}

// One row of LabelSmoothedCrossEntropy with a non-pad target: its smoothed loss and NLL, and
// the row's gradient in place.
TNMT_VECTORIZE void SmoothedCrossEntropyRow(float* row, int32_t t, int vocab, double on, double off,
                                            int32_t pad, double* loss, double* nll) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < vocab; ++j) mx = row[j] > mx ? row[j] : mx;
  float sum = 0.0f, sum_x = 0.0f;
#pragma omp simd reduction(+ : sum, sum_x)
  for (int j = 0; j < vocab; ++j) {
    sum += ExpApprox(row[j] - mx);
    sum_x += row[j];
  }
  const float lse = mx + std::log(sum);
  RowLoss(sum_x, row[t], row[pad], lse, vocab, on, off, loss, nll);
  const float offf = static_cast<float>(off);
#pragma omp simd
  for (int j = 0; j < vocab; ++j) row[j] = ExpApprox(row[j] - lse) - offf;
  row[pad] += offf;
  row[t] -= static_cast<float>(on - off);
}

#if defined(__x86_64__)
// SmoothedCrossEntropyRow with one exp per logit (p_j = exp(x_j - max) / sum, the numerators kept
// in the row) instead of two, on 16-lane vectors: AVX-512, and AVX2 on halves with the same
// arithmetic (vec16.h), so both give the same loss and gradient bit for bit. The compiler left
// the scalar loop unvectorized for AVX2.
namespace avx512 {

// The passes of SmoothedCrossEntropyRow before its gradient: the row's loss and NLL, and its softmax
// numerators in place; returns 1 / their sum.
TNMT_AVX512_TARGET float SmoothedCrossEntropyNumerators(float* row, int32_t t, int vocab, double on, double off,
                                                        int32_t pad, double* loss, double* nll) {
  __m512 acc = _mm512_setzero_ps();
  for (int j = 0; j < vocab; j += 16) {
    const __mmask16 m = vocab - j >= 16 ? static_cast<__mmask16>(0xFFFF) : vec16::avx512::TailMask(vocab - j);
    acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, row + j));
  }
  const float sum_x = vec16::avx512::ReduceAdd(acc), x_t = row[t], x_pad = row[pad];
  float sum;
  const float mx = vec16::avx512::MaxAndExpSum(row, vocab, row, &sum);
  RowLoss(sum_x, x_t, x_pad, mx + std::log(sum), vocab, on, off, loss, nll);
  return 1.0f / sum;
}

TNMT_AVX512_TARGET void SmoothedCrossEntropyRow(float* row, int32_t t, int vocab, double on, double off, int32_t pad,
                                                double* loss, double* nll) {
  const __m512 inv = _mm512_set1_ps(SmoothedCrossEntropyNumerators(row, t, vocab, on, off, pad, loss, nll));
  const __m512 voff = _mm512_set1_ps(static_cast<float>(off));
  for (int j = 0; j < vocab; j += 16) {
    const __mmask16 m = vocab - j >= 16 ? static_cast<__mmask16>(0xFFFF) : vec16::avx512::TailMask(vocab - j);
    _mm512_mask_storeu_ps(row + j, m, _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + j), inv), voff));
  }
  row[pad] += static_cast<float>(off);
  row[t] -= static_cast<float>(on - off);
}

// SmoothedCrossEntropyRow with the gradient stored as bfloat16 over the row's first half (value j
// at byte 2j, written after the float32 at byte 4j is read): each value the float32 one above,
// pad and target adjusted alike, rounded as the bfloat16 GEMMs round their operands
// (vcvtneps2bf16).
TNMT_BF16_TARGET void SmoothedCrossEntropyRowBf16(float* row, int32_t t, int vocab, double on, double off,
                                                  int32_t pad, double* loss, double* nll) {
  const __m512 inv = _mm512_set1_ps(SmoothedCrossEntropyNumerators(row, t, vocab, on, off, pad, loss, nll));
  const __m512 voff = _mm512_set1_ps(static_cast<float>(off)), vt = _mm512_set1_ps(static_cast<float>(on - off));
  uint16_t* out = reinterpret_cast<uint16_t*>(row);
  for (int j = 0; j < vocab; j += 16) {
    const __mmask16 m = vocab - j >= 16 ? static_cast<__mmask16>(0xFFFF) : vec16::avx512::TailMask(vocab - j);
    __m512 g = _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + j), inv), voff);
    if (pad >= j && pad < j + 16) g = _mm512_mask_add_ps(g, static_cast<__mmask16>(1u << (pad - j)), g, voff);
    if (t >= j && t < j + 16) g = _mm512_mask_sub_ps(g, static_cast<__mmask16>(1u << (t - j)), g, vt);
    _mm256_mask_storeu_epi16(out + j, m, (__m256i)_mm512_cvtneps_pbh(g));
  }
}

// x + r over one row, stored as bfloat16 over x's first half (value j at byte 2j, written after
// the float32 at byte 4j is read), rounded as SmoothedCrossEntropyRowBf16 rounds.
TNMT_BF16_TARGET void AddRowToBfloat16(float* x, const float* r, int vocab) {
  uint16_t* out = reinterpret_cast<uint16_t*>(x);
  for (int j = 0; j < vocab; j += 16) {
    const __mmask16 m = vocab - j >= 16 ? static_cast<__mmask16>(0xFFFF) : vec16::avx512::TailMask(vocab - j);
    const __m512 s = _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + j), _mm512_maskz_loadu_ps(m, r + j));
    _mm256_mask_storeu_epi16(out + j, m, (__m256i)_mm512_cvtneps_pbh(s));
  }
}

}  // namespace avx512

namespace avx2 {

TNMT_AVX2_TARGET void SmoothedCrossEntropyRow(float* row, int32_t t, int vocab, double on, double off, int32_t pad,
                                              double* loss, double* nll) {
  using vec16::avx2::HiMask;
  using vec16::avx2::LoMask;
  __m256 al = _mm256_setzero_ps(), ah = al;
  for (int j = 0; j < vocab; j += 16) {
    al = _mm256_add_ps(al, _mm256_maskload_ps(row + j, LoMask(vocab - j)));
    ah = _mm256_add_ps(ah, _mm256_maskload_ps(row + j + 8, HiMask(vocab - j)));
  }
  const float sum_x = vec16::avx2::ReduceAdd(al, ah), x_t = row[t], x_pad = row[pad];
  float sum;
  const float mx = vec16::avx2::MaxAndExpSum(row, vocab, row, &sum);
  RowLoss(sum_x, x_t, x_pad, mx + std::log(sum), vocab, on, off, loss, nll);
  const __m256 inv = _mm256_set1_ps(1.0f / sum), voff = _mm256_set1_ps(static_cast<float>(off));
  for (int j = 0; j < vocab; j += 16) {
    const __m256i kl = LoMask(vocab - j), kh = HiMask(vocab - j);
    Avx2StoreFirst(row + j, vocab - j, _mm256_sub_ps(_mm256_mul_ps(_mm256_maskload_ps(row + j, kl), inv), voff));
    Avx2StoreFirst(row + j + 8, vocab - j - 8,
                   _mm256_sub_ps(_mm256_mul_ps(_mm256_maskload_ps(row + j + 8, kh), inv), voff));
  }
  row[pad] += static_cast<float>(off);
  row[t] -= static_cast<float>(on - off);
}

}  // namespace avx2
#endif

}  // namespace

namespace {

// A row's float32 gradient (vocab values at row) as bfloat16 over its first half, in place.
void RowToBfloat16(float* row, int vocab) {
  for (int j = 0; j < vocab; ++j) {
    const float x = RoundToBfloat16(row[j]);
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    const uint16_t half = static_cast<uint16_t>(bits >> 16);
    std::memcpy(reinterpret_cast<char*>(row) + 2 * static_cast<int64_t>(j), &half, sizeof(half));
  }
}

// rows x vocab: each row of x + r as bfloat16 over x's row's first half, in place (the AVX-512
// BF16 kernel where the bfloat16 GEMM has its own, or the float32 sum and RowToBfloat16).
void AddRowsToBfloat16(float* x, const float* r, int64_t rows, int vocab) {
  ParallelForLarge(rows, vocab, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* xi = x + i * vocab;
      const float* ri = r + i * vocab;
#if defined(__x86_64__)
      if (HasBf16Gemm()) {
        avx512::AddRowToBfloat16(xi, ri, vocab);
        continue;
      }
#endif
      for (int j = 0; j < vocab; ++j) xi[j] += ri[j];
      RowToBfloat16(xi, vocab);
    }
  });
}

// LabelSmoothedCrossEntropy, and with bf16 LabelSmoothedCrossEntropyBf16.
double CrossEntropyRows(float* logits, const int32_t* targets, int64_t rows, int vocab, float eps, int32_t pad,
                        double* nll_sum, int64_t* count, bool bf16) {
  const double off = vocab > 1 ? static_cast<double>(eps) / (vocab - 1) : 0.0;
  const double on = 1.0 - eps + off;
  std::vector<double> row_loss(rows), row_nll(rows);
  // Rows are independent: split over the compute threads; sums are taken in row order below,
  // so the result does not depend on the split.
  // One kernel per ISA for the rows with a target; pad rows get a zero gradient.
  auto row = SmoothedCrossEntropyRow;
#if defined(__x86_64__)
  if (UseAvx512()) {
    row = avx512::SmoothedCrossEntropyRow;
  } else if (UseAvx2()) {
    row = avx2::SmoothedCrossEntropyRow;
  }
#endif
  // bfloat16: the AVX-512 BF16 kernel, or any float32 one and then the row rounded.
  bool round_after = bf16;
#if defined(__x86_64__)
  if (bf16 && HasBf16Gemm()) {
    row = avx512::SmoothedCrossEntropyRowBf16;
    round_after = false;
  }
#endif
  ParallelFor(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      if (targets[r] == pad) {
        std::memset(logits + r * vocab, 0, (bf16 ? sizeof(uint16_t) : sizeof(float)) * vocab);
        row_loss[r] = row_nll[r] = 0.0;
      } else {
        row(logits + r * vocab, targets[r], vocab, on, off, pad, &row_loss[r], &row_nll[r]);
        if (round_after) RowToBfloat16(logits + r * vocab, vocab);
      }
    }
  });
  double loss = 0.0, nll = 0.0;
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r) {
    loss += row_loss[r];
    nll += row_nll[r];
    n += targets[r] != pad;
  }
  if (nll_sum != nullptr) *nll_sum = nll;
  if (count != nullptr) *count = n;
  return loss;
}

}  // namespace

double LabelSmoothedCrossEntropy(float* logits, const int32_t* targets, int64_t rows, int vocab, float eps,
                                 int32_t pad, double* nll_sum, int64_t* count) {
  return CrossEntropyRows(logits, targets, rows, vocab, eps, pad, nll_sum, count, /*bf16=*/false);
}

double LabelSmoothedCrossEntropyBf16(float* logits, const int32_t* targets, int64_t rows, int vocab, float eps,
                                     int32_t pad, double* nll_sum, int64_t* count) {
  return CrossEntropyRows(logits, targets, rows, vocab, eps, pad, nll_sum, count, /*bf16=*/true);
}

namespace {

// One pair of RDropConsistency: a and b become their gradients; returns h * (KL(p||q) + KL(q||p)).
// la, lb: the rows' log-sum-exps.
TNMT_VECTORIZE double ConsistencyPair(float* a, float* b, float la, float lb, int vocab, float h) {
  // a, b become log p, log q; the two divergences are summed on the way.
  float kpq = 0.0f, kqp = 0.0f;
#pragma omp simd reduction(+ : kpq, kqp)
  for (int j = 0; j < vocab; ++j) {
    const float lp = a[j] - la, lq = b[j] - lb, d = lp - lq;
    kpq += ExpApprox(lp) * d;
    kqp -= ExpApprox(lq) * d;
    a[j] = lp;
    b[j] = lq;
  }
#pragma omp simd
  for (int j = 0; j < vocab; ++j) {
    const float p = ExpApprox(a[j]), q = ExpApprox(b[j]), d = a[j] - b[j];
    a[j] = h * (p * (d - kpq) + p - q);
    b[j] = h * (q * (-d - kqp) + q - p);
  }
  return static_cast<double>(h) * (static_cast<double>(kpq) + kqp);
}

}  // namespace

double RDropConsistency(float* logits, const int32_t* targets, int64_t pairs, int vocab, float alpha,
                        int32_t pad) {
  const float h = 0.5f * alpha;
  std::vector<double> pair_loss(static_cast<size_t>(std::max<int64_t>(pairs, 0)));
  const int64_t half = pairs * vocab;
  std::vector<float> lse(static_cast<size_t>(2 * std::max<int64_t>(pairs, 0)));
  LogSumExp(lse.data(), logits, 2 * pairs, vocab);
  ParallelFor(pairs, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* a = logits + r * vocab;
      float* b = a + half;
      if (targets[r] == pad) {
        std::memset(a, 0, sizeof(float) * vocab);
        std::memset(b, 0, sizeof(float) * vocab);
        pair_loss[r] = 0.0;
      } else {
        pair_loss[r] = ConsistencyPair(a, b, lse[r], lse[r + pairs], vocab, h);
      }
    }
  });
  // Summed in pair order: the result does not depend on the split over threads.
  double total = 0.0;
  for (double l : pair_loss) total += l;
  return total;
}

namespace {

double RDropRows(float* logits, const int32_t* targets, int64_t pairs, int vocab, float eps, float alpha, int32_t pad,
                 double* nll_sum, int64_t* count, int64_t block_pairs, bool bf16) {
  const int64_t block = block_pairs > 0 ? block_pairs : std::max<int64_t>(1, (int64_t{1} << 20) / vocab);
  thread_local std::vector<float> copy;  // kept between steps (no new pages to fault in each time)
  const size_t need = static_cast<size_t>(2 * std::min(block, std::max<int64_t>(pairs, 0))) * vocab;
  if (copy.size() < need) copy.resize(need);
  double loss = 0.0, nll = 0.0;
  int64_t n = 0;
  for (int64_t p0 = 0; p0 < pairs; p0 += block) {
    const int64_t rows = std::min(block, pairs - p0);
    float* halves[2] = {logits + p0 * vocab, logits + (pairs + p0) * vocab};
    float* copies[2] = {copy.data(), copy.data() + rows * vocab};
    for (int h = 0; h < 2; ++h) Copy(copies[h], halves[h], rows * vocab);
    loss += RDropConsistency(copy.data(), targets + p0, rows, vocab, alpha, pad);
    for (int h = 0; h < 2; ++h) {
      double block_nll = 0.0;
      int64_t block_n = 0;
      loss += LabelSmoothedCrossEntropy(halves[h], targets + h * pairs + p0, rows, vocab, eps, pad, &block_nll,
                                        &block_n);
      nll += block_nll;
      n += block_n;
      if (bf16) {
        AddRowsToBfloat16(halves[h], copies[h], rows, vocab);
      } else {
        Add(halves[h], halves[h], copies[h], rows * vocab);
      }
    }
  }
  if (nll_sum != nullptr) *nll_sum = nll;
  if (count != nullptr) *count = n;
  return loss;
}

}  // namespace

double LabelSmoothedCrossEntropyWithRDrop(float* logits, const int32_t* targets, int64_t pairs, int vocab,
                                          float eps, float alpha, int32_t pad, double* nll_sum, int64_t* count,
                                          int64_t block_pairs) {
  return RDropRows(logits, targets, pairs, vocab, eps, alpha, pad, nll_sum, count, block_pairs, /*bf16=*/false);
}

double LabelSmoothedCrossEntropyWithRDropBf16(float* logits, const int32_t* targets, int64_t pairs, int vocab,
                                              float eps, float alpha, int32_t pad, double* nll_sum, int64_t* count,
                                              int64_t block_pairs) {
  return RDropRows(logits, targets, pairs, vocab, eps, alpha, pad, nll_sum, count, block_pairs, /*bf16=*/true);
}

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

void ActivationDropout(float* x, int64_t rows, int cols, Activation act, float p, uint64_t seed, uint64_t stream) {
  // Blocks of rows of about 16 K elements: the activation's output is still in L1 or L2 when the
  // mask is applied.
  const int64_t block = std::max<int64_t>(1, (int64_t{1} << 14) / std::max(cols, 1));
  const int64_t blocks = (rows + block - 1) / block;
  ParallelForLarge(blocks, block * cols, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * block, n = std::min(block, rows - r0);
      float* xb = x + r0 * cols;
      BiasActivation(xb, nullptr, n, cols, act);
      if (p > 0.0f) DropoutRangeAnyIsa(xb, xb, nullptr, n * cols, static_cast<uint64_t>(r0 * cols), p, seed, stream);
    }
  });
}

void DropoutActivationBackward(float* dx, const float* pre, int64_t count, Activation act, float p, uint64_t seed,
                               uint64_t stream) {
  constexpr int64_t kBlock = int64_t{1} << 14;
  ParallelForLarge((count + kBlock - 1) / kBlock, kBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kBlock, end = std::min(count, begin + kBlock);
      if (p > 0.0f) {
        DropoutRangeAnyIsa(dx + begin, dx + begin, nullptr, end - begin, static_cast<uint64_t>(begin), p, seed, stream);
      }
      ActivationBackwardRange(dx, dx, pre, begin, end, act);
    }
  });
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

namespace {

TNMT_VECTORIZE void AdamRange(float* w, float* m, float* v, const float* g, int64_t begin, int64_t end,
                              float grad_scale, const AdamOptions& o, float step_size, float inv_sqrt_bc2) {
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i] * grad_scale;
    m[i] = o.beta1 * m[i] + (1.0f - o.beta1) * gi;
    v[i] = o.beta2 * v[i] + (1.0f - o.beta2) * gi * gi;
    w[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + o.eps);
  }
}

}  // namespace

void AdamUpdate(float* w, float* m, float* v, const float* g, int64_t count, float grad_scale,
                const AdamOptions& o) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(o.beta1), static_cast<double>(o.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(o.beta2), static_cast<double>(o.step));
  const float step_size = static_cast<float>(o.lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  ParallelForLarge(count, 1, [&](int64_t begin, int64_t end) {
    AdamRange(w, m, v, g, begin, end, grad_scale, o, step_size, inv_sqrt_bc2);
  });
}

}  // namespace tnmt::kernels::cpu
