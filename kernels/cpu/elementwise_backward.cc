// The gradients of the elementwise kernels (elementwise.h): layer norm, the activations (alone
// and after dropout's backward) and the bias's column sums. Column reductions go by blocks of
// columns, each column summed over the rows in order, so results do not depend on the thread
// count.
#include "kernels/cpu/elementwise.h"

#include "kernels/cpu/dropout.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

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

void DropoutActivationBackward(float* dx, const float* pre, int64_t count, Activation act, float p, uint64_t seed,
                               uint64_t stream) {
  constexpr int64_t kBlock = int64_t{1} << 14;
  ParallelForLarge((count + kBlock - 1) / kBlock, kBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kBlock, end = std::min(count, begin + kBlock);
      if (p > 0.0f) DropoutBlock(dx + begin, end - begin, static_cast<uint64_t>(begin), p, seed, stream);
      ActivationBackwardRange(dx, dx, pre, begin, end, act);
    }
  });
}

}  // namespace tnmt::kernels::cpu
