// Embedding kernels; see embedding.h.
#include "kernels/cpu/embedding.h"

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

#include <cmath>
#include <utility>
#include <vector>

namespace tnmt::kernels::cpu {

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

namespace {

// For i < pairs: table[p, cols(i).first] = sin(p * f_i), table[p, cols(i).second] = cos(p * f_i)
// (when that column is < d), f_i = 10000^(-2i/d); rows split over the threads (model load:
// 4096 rows of d/2 sin/cos pairs).
template <class Cols>
void Sinusoids(float* table, int rows, int d, int pairs, Cols cols) {
  std::vector<double> freq(pairs);
  for (int i = 0; i < pairs; ++i) freq[i] = std::pow(10000.0, -2.0 * i / d);
  ParallelForLarge(rows, 16 * d, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      float* row = table + p * d;
      for (int i = 0; i < pairs; ++i) {
        const double angle = static_cast<double>(p) * freq[i];
        const std::pair<int, int> c = cols(i);
        row[c.first] = static_cast<float>(std::sin(angle));
        if (c.second < d) row[c.second] = static_cast<float>(std::cos(angle));
      }
    }
  });
}

}  // namespace

void SinusoidalPositions(float* table, int rows, int d) {
  Sinusoids(table, rows, d, (d + 1) / 2, [](int i) { return std::pair<int, int>(2 * i, 2 * i + 1); });
}

void SinusoidalPositionsHalves(float* table, int rows, int d) {
  const int half = d / 2;
  Sinusoids(table, rows, d, half, [half](int i) { return std::pair<int, int>(i, half + i); });
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

}  // namespace tnmt::kernels::cpu
