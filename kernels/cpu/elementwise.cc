// Elementwise and row-wise CPU kernels; see elementwise.h. Loops are written so that the
// compiler vectorizes them; each row is processed in a fixed index order, so a row's result
// never depends on which other rows are in the batch.
#include "kernels/cpu/elementwise.h"

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

#include <cmath>
#include <cstring>

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

const char* ActivationName(Activation act) {
  switch (act) {
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu";
    case Activation::kGeluErf: return "gelu_erf";
    case Activation::kSwish: return "swish";
  }
  return "?";
}

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

TNMT_VECTORIZE void Add(float* out, const float* x, const float* r, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = x[i] + r[i];
}

TNMT_VECTORIZE void LayerNorm(float* out, const float* x, const float* r, const float* gamma, const float* beta,
               int64_t rows, int d, float eps) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * d;
    float* o = out + i * d;
    if (r != nullptr) {
      const float* rr = r + i * d;
      for (int j = 0; j < d; ++j) o[j] = xr[j] + rr[j];
      xr = o;
    }
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
    const float inv = 1.0f / std::sqrt(sq / d + eps);
    for (int j = 0; j < d; ++j) o[j] = (xr[j] - mean) * inv * gamma[j] + beta[j];
  }
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
  ParallelFor(rows, [&](int64_t begin, int64_t end) { LogSumExpRows(lse, x, begin, end, n); });
}

TNMT_VECTORIZE void EmbedTokens(float* out, const int32_t* ids, const int32_t* positions, int64_t count,
                 const float* table, const float* pos, int d, float scale) {
  for (int64_t i = 0; i < count; ++i) {
    const float* e = table + static_cast<int64_t>(ids[i]) * d;
    float* o = out + i * d;
    if (pos != nullptr) {
      const float* p = pos + static_cast<int64_t>(positions[i]) * d;
      for (int j = 0; j < d; ++j) o[j] = e[j] * scale + p[j];
    } else {
      for (int j = 0; j < d; ++j) o[j] = e[j] * scale;
    }
  }
}

void SinusoidalPositions(float* table, int rows, int d) {
  for (int p = 0; p < rows; ++p) {
    for (int i = 0; 2 * i < d; ++i) {
      const double freq = std::pow(10000.0, -2.0 * i / d);
      table[static_cast<int64_t>(p) * d + 2 * i] = static_cast<float>(std::sin(p * freq));
      if (2 * i + 1 < d) {
        table[static_cast<int64_t>(p) * d + 2 * i + 1] = static_cast<float>(std::cos(p * freq));
      }
    }
  }
}

void SinusoidalPositionsHalves(float* table, int rows, int d) {
  const int half = d / 2;
  for (int p = 0; p < rows; ++p) {
    for (int i = 0; i < half; ++i) {
      const double freq = std::pow(10000.0, -2.0 * i / d);
      table[static_cast<int64_t>(p) * d + i] = static_cast<float>(std::sin(p * freq));
      table[static_cast<int64_t>(p) * d + half + i] = static_cast<float>(std::cos(p * freq));
    }
  }
}

void HalfToFloat(float* out, const uint16_t* in, int64_t count) {
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

void BFloat16ToFloat(float* out, const uint16_t* in, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t bits = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(&out[i], &bits, sizeof(bits));
  }
}

}  // namespace tnmt::kernels::cpu
