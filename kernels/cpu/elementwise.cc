// Elementwise and row-wise CPU kernels; see elementwise.h. Loops are written so that the
// compiler vectorizes them; each row is processed in a fixed index order, so a row's result
// never depends on which other rows are in the batch.
//
// LayerNorm and LogSumExp, on the decoding path, also have explicit AVX-512 and AVX2 kernels
// (vec16.h): each row's sums run over 16 lanes (lane l adds elements l, l + 16, ... in order)
// and end in one fixed tree, and products are fused exactly where written, so the two ISAs give
// bit-identical rows and a sentence's scores do not depend on whether the CPU has AVX-512. The
// portable loops (CPUs without AVX2, TNMT_CPU_ISA=portable) compute the same values to rounding.
#include "kernels/cpu/elementwise.h"

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vec16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

namespace tnmt::kernels::cpu {

namespace {

inline float Gelu(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

inline float GeluErf(float x) {
  constexpr float kInvSqrt2 = 0.7071067811865476f;
  return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2));
}

inline float Swish(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

TNMT_VECTORIZE void BiasActivation(float* y, const float* bias, int64_t rows, int n, Activation act) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * n;
    if (bias != nullptr) {
      for (int j = 0; j < n; ++j) row[j] += bias[j];
    }
    switch (act) {
      case Activation::kRelu:
        for (int j = 0; j < n; ++j) row[j] = row[j] > 0.0f ? row[j] : 0.0f;
        break;
      case Activation::kGelu:
        for (int j = 0; j < n; ++j) row[j] = Gelu(row[j]);
        break;
      case Activation::kGeluErf:
        for (int j = 0; j < n; ++j) row[j] = GeluErf(row[j]);
        break;
      case Activation::kSwish:
        for (int j = 0; j < n; ++j) row[j] = Swish(row[j]);
        break;
    }
  }
}

TNMT_VECTORIZE void AddBias(float* y, const float* bias, int64_t rows, int n) {
  if (bias == nullptr) return;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * n;
    for (int j = 0; j < n; ++j) row[j] += bias[j];
  }
}

namespace {

TNMT_VECTORIZE void AddRange(float* out, const float* x, const float* r, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) out[i] = x[i] + r[i];
}

}  // namespace

void Add(float* out, const float* x, const float* r, int64_t count) {
  ParallelForLarge(count, 1, [&](int64_t begin, int64_t end) { AddRange(out, x, r, begin, end); });
}

void Copy(float* out, const float* x, int64_t count) {
  ParallelForLarge(count, 1, [&](int64_t begin, int64_t end) {
    std::memcpy(out + begin, x + begin, sizeof(float) * (end - begin));
  });
}

namespace {

#if defined(__x86_64__)

namespace avx512 {

using vec16::avx512::ReduceAdd;
using vec16::avx512::TailMask;

inline __mmask16 ChunkMask(int n, int j) {
  return n - j >= 16 ? static_cast<__mmask16>(0xFFFF) : TailMask(n - j);
}

// One row of LayerNorm (out may alias x).
// A row's mean and 1 / sqrt(variance + eps), as LayerNormRow normalizes it (and
// LayerNormStats reports it for the backward pass).
TNMT_AVX512_TARGET void RowMeanRstd(const float* x, int d, float eps, float* mean_out, float* rstd_out) {
  __m512 acc = _mm512_setzero_ps();
  for (int j = 0; j < d; j += 16) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(ChunkMask(d, j), x + j));
  const float mean = ReduceAdd(acc) / d;
  const __m512 vmean = _mm512_set1_ps(mean);
  acc = _mm512_setzero_ps();
  for (int j = 0; j < d; j += 16) {
    const __mmask16 m = ChunkMask(d, j);
    const __m512 c = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + j), vmean);
    acc = _mm512_fmadd_ps(c, c, acc);
  }
  *mean_out = mean;
  *rstd_out = 1.0f / std::sqrt(ReduceAdd(acc) / d + eps);
}

TNMT_AVX512_TARGET void LayerNormRow(float* o, const float* x, const float* r, const float* gamma,
                                     const float* beta, int d, float eps) {
  if (r != nullptr) {
    for (int j = 0; j < d; j += 16) {
      const __mmask16 m = ChunkMask(d, j);
      _mm512_mask_storeu_ps(o + j, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + j), _mm512_maskz_loadu_ps(m, r + j)));
    }
    x = o;
  }
  float mean, rstd;
  RowMeanRstd(x, d, eps, &mean, &rstd);
  const __m512 vmean = _mm512_set1_ps(mean), vinv = _mm512_set1_ps(rstd);
  for (int j = 0; j < d; j += 16) {
    const __mmask16 m = ChunkMask(d, j);
    const __m512 c = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), vmean);
    const __m512 y = _mm512_fmadd_ps(_mm512_mul_ps(c, vinv), _mm512_maskz_loadu_ps(m, gamma + j),
                                     _mm512_maskz_loadu_ps(m, beta + j));
    _mm512_mask_storeu_ps(o + j, m, y);
  }
}

// max + log(sum exp(x - max)) of one row.
TNMT_AVX512_TARGET float LogSumExpRow(const float* x, int n) {
  float sum;
  const float max = vec16::avx512::MaxAndExpSum(x, n, nullptr, &sum);
  return max + std::log(sum);
}

}  // namespace avx512

namespace avx2 {

using vec16::avx2::HiMask;
using vec16::avx2::LoMask;
using vec16::avx2::ReduceAdd;

// avx512::RowMeanRstd on halves.
TNMT_AVX2_TARGET void RowMeanRstd(const float* x, int d, float eps, float* mean_out, float* rstd_out) {
  __m256 lo = _mm256_setzero_ps(), hi = lo;
  for (int j = 0; j < d; j += 16) {
    lo = _mm256_add_ps(lo, _mm256_maskload_ps(x + j, LoMask(d - j)));
    hi = _mm256_add_ps(hi, _mm256_maskload_ps(x + j + 8, HiMask(d - j)));
  }
  const float mean = ReduceAdd(lo, hi) / d;
  const __m256 vmean = _mm256_set1_ps(mean);
  lo = hi = _mm256_setzero_ps();
  for (int j = 0; j < d; j += 16) {
    const __m256i ml = LoMask(d - j), mh = HiMask(d - j);
    const __m256 cl = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(x + j, ml), vmean), _mm256_castsi256_ps(ml));
    const __m256 ch = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(x + j + 8, mh), vmean), _mm256_castsi256_ps(mh));
    lo = _mm256_fmadd_ps(cl, cl, lo);
    hi = _mm256_fmadd_ps(ch, ch, hi);
  }
  *mean_out = mean;
  *rstd_out = 1.0f / std::sqrt(ReduceAdd(lo, hi) / d + eps);
}

// avx512::LayerNormRow on halves.
TNMT_AVX2_TARGET void LayerNormRow(float* o, const float* x, const float* r, const float* gamma,
                                   const float* beta, int d, float eps) {
  if (r != nullptr) {
    for (int j = 0; j < d; j += 16) {
      const int n = d - j;
      const __m256i ml = LoMask(n), mh = HiMask(n);
      Avx2StoreFirst(o + j, n, _mm256_add_ps(_mm256_maskload_ps(x + j, ml), _mm256_maskload_ps(r + j, ml)));
      Avx2StoreFirst(o + j + 8, n - 8, _mm256_add_ps(_mm256_maskload_ps(x + j + 8, mh), _mm256_maskload_ps(r + j + 8, mh)));
    }
    x = o;
  }
  float mean, rstd;
  RowMeanRstd(x, d, eps, &mean, &rstd);
  const __m256 vmean = _mm256_set1_ps(mean), vinv = _mm256_set1_ps(rstd);
  for (int j = 0; j < d; j += 16) {
    for (int h = 0; h < 2; ++h) {
      const __m256i m = h == 0 ? LoMask(d - j) : HiMask(d - j);
      const int k = j + 8 * h;
      const __m256 c = _mm256_sub_ps(_mm256_maskload_ps(x + k, m), vmean);
      const __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(c, vinv), _mm256_maskload_ps(gamma + k, m),
                                       _mm256_maskload_ps(beta + k, m));
      Avx2StoreFirst(o + k, d - k, y);
    }
  }
}

// avx512::LogSumExpRow on halves.
TNMT_AVX2_TARGET float LogSumExpRow(const float* x, int n) {
  float sum;
  const float max = vec16::avx2::MaxAndExpSum(x, n, nullptr, &sum);
  return max + std::log(sum);
}

}  // namespace avx2

#endif  // __x86_64__

TNMT_VECTORIZE void RowMeanRstdPortable(const float* xr, int d, float eps, float* mean_out, float* rstd_out) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < d; ++j) sum += xr[j];
  const float mean = sum / d;
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (int j = 0; j < d; ++j) {
    const float c = xr[j] - mean;
    sq += c * c;
  }
  *mean_out = mean;
  *rstd_out = 1.0f / std::sqrt(sq / d + eps);
}

TNMT_VECTORIZE void LayerNormPortable(float* out, const float* x, const float* r, const float* gamma,
                                      const float* beta, int64_t rows, int d, float eps) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * d;
    float* o = out + i * d;
    if (r != nullptr) {
      const float* rr = r + i * d;
      for (int j = 0; j < d; ++j) o[j] = xr[j] + rr[j];
      xr = o;
    }
    float mean, inv;
    RowMeanRstdPortable(xr, d, eps, &mean, &inv);
    for (int j = 0; j < d; ++j) o[j] = (xr[j] - mean) * inv * gamma[j] + beta[j];
  }
}

}  // namespace

void LayerNorm(float* out, const float* x, const float* r, const float* gamma, const float* beta,
               int64_t rows, int d, float eps) {
  // Rows [begin, end); rows are independent, so any split gives the same bits.
  auto run = [&](int64_t begin, int64_t end) {
    const int64_t at = begin * d;
    const float* rb = r != nullptr ? r + at : nullptr;
#if defined(__x86_64__)
    if (UseAvx2() && d > 0) {
      const bool avx512 = UseAvx512();
      for (int64_t i = begin; i < end; ++i) {
        float* o = out + i * d;
        const float* ri = r != nullptr ? r + i * d : nullptr;
        if (avx512) {
          avx512::LayerNormRow(o, x + i * d, ri, gamma, beta, d, eps);
        } else {
          avx2::LayerNormRow(o, x + i * d, ri, gamma, beta, d, eps);
        }
      }
      return;
    }
#endif
    LayerNormPortable(out + at, x + at, rb, gamma, beta, end - begin, d, eps);
  };
  ParallelForLarge(rows, d, run);
}

void LayerNormStats(float* mean_rstd, const float* x, int64_t rows, int d, float eps) {
  // The path LayerNorm takes for a row (LayerNormRow per ISA, else the portable loop).
  using RowStatsFn = void (*)(const float*, int, float, float*, float*);
  RowStatsFn row_stats = RowMeanRstdPortable;
#if defined(__x86_64__)
  if (UseAvx2() && d > 0) row_stats = UseAvx512() ? avx512::RowMeanRstd : avx2::RowMeanRstd;
#endif
  ParallelForLarge(rows, d, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) row_stats(x + i * d, d, eps, mean_rstd + 2 * i, mean_rstd + 2 * i + 1);
  });
}

TNMT_VECTORIZE void Softmax(float* x, int64_t rows, int n) {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = x + i * n;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < n; ++j) mx = row[j] > mx ? row[j] : mx;
    if (mx == -INFINITY) {  // every entry masked: define the result as all zeros
      std::memset(row, 0, sizeof(float) * n);
      continue;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; ++j) {
      row[j] = ExpApprox(row[j] - mx);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
    for (int j = 0; j < n; ++j) row[j] *= inv;
  }
}

namespace {

TNMT_VECTORIZE void LogSumExpRows(float* lse, const float* x, int64_t begin, int64_t end, int n) {
  for (int64_t i = begin; i < end; ++i) {
    const float* row = x + i * n;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < n; ++j) mx = row[j] > mx ? row[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; ++j) sum += ExpApprox(row[j] - mx);
    lse[i] = mx + std::log(sum);
  }
}

}  // namespace

void LogSumExp(float* lse, const float* x, int64_t rows, int n) {
#if defined(__x86_64__)
  if (UseAvx2() && n > 0) {
    const bool avx512 = UseAvx512();
    ParallelFor(rows, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        lse[i] = avx512 ? avx512::LogSumExpRow(x + i * n, n) : avx2::LogSumExpRow(x + i * n, n);
      }
    });
    return;
  }
#endif
  ParallelFor(rows, [&](int64_t begin, int64_t end) { LogSumExpRows(lse, x, begin, end, n); });
}

namespace {

void HalfToFloatScalar(float* out, const uint16_t* in, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t h = in[i];
    const uint32_t sign = (h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1f;
    const uint32_t mant = h & 0x3ff;
    float v;
    if (exp == 0) {
      v = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
    } else if (exp == 31) {
      v = mant == 0 ? INFINITY : NAN;
    } else {
      const uint32_t bits = ((exp + 112) << 23) | (mant << 13);
      std::memcpy(&v, &bits, sizeof(v));
    }
    uint32_t vb;
    std::memcpy(&vb, &v, sizeof(vb));
    vb |= sign;
    std::memcpy(&out[i], &vb, sizeof(vb));
  }
}

#if defined(__x86_64__)
// 8 at a time with F16C's conversion (exact, as every half is a float; NaNs stay NaNs).
__attribute__((target("avx2,f16c"))) void HalfToFloatF16c(float* out, const uint16_t* in,
                                                          int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  HalfToFloatScalar(out + i, in + i, count - i);
}
#endif

}  // namespace

void HalfToFloat(float* out, const uint16_t* in, int64_t count) {
  // Model load converts every float16 weight: split over the threads.
  ParallelForLarge(count, 1, [&](int64_t begin, int64_t end) {
#if defined(__x86_64__)
    static const bool f16c = __builtin_cpu_supports("f16c");
    if (UseAvx2() && f16c) {
      HalfToFloatF16c(out + begin, in + begin, end - begin);
      return;
    }
#endif
    HalfToFloatScalar(out + begin, in + begin, end - begin);
  });
}

void BFloat16ToFloat(float* out, const uint16_t* in, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t bits = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(&out[i], &bits, sizeof(bits));
  }
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
      if (p > 0.0f) DropoutBlock(xb, n * cols, static_cast<uint64_t>(r0 * cols), p, seed, stream);
    }
  });
}

}  // namespace tnmt::kernels::cpu
