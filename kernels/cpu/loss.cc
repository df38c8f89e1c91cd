// The label-smoothed cross-entropy and R-Drop's consistency term; see loss.h.
#include "kernels/cpu/loss.h"

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vec16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace tnmt::kernels::cpu {

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

}  // namespace tnmt::kernels::cpu
