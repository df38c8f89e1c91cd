// The elementwise and row-wise kernels both devices have (kernels/cpu/elementwise.h,
// kernels/cuda/elementwise.h), each test body run on every device (kernels/testing/devices.h)
// against a naive host loop: Add, BiasActivation (ReLU, GELU), LayerNorm, Softmax, and the
// backward of layer norm, of the activations and of the bias (column sums). Every result is
// also computed twice and must give the same bits (both devices are deterministic).
//
// On one device only: AddBias, ActivationDropout, Copy, LayerNormStats, LogSumExp, the half to
// float conversions, DropoutActivationBackward and the GELU-erf and Swish activations are CPU
// kernels (tested in kernels/cpu/elementwise_test.cc and backward_test.cc); ScaleInPlace is a
// CUDA kernel (kernels/cuda/elementwise_test.cc).
//
// Tolerances: Add and ReLU are one correctly rounded float operation per element, so both
// devices must give the host's bits. The rest are checked against float64 and allowed the
// float32 error of each device's own evaluation order: each bound is the sum of the CPU's
// measured error against float64 and the bound the GPU had against the CPU kernel.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/activation.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/testing/devices.h"
#if TNMT_TEST_CUDA
#include "kernels/cuda/elementwise.h"
#endif

namespace tnmt::kernels {
namespace {

using testing::Device;
using testing::ExpectAllNear;
using testing::ExpectSameBits;
using testing::MaxScaledError;
using testing::RelativeError;

class ElementwiseTest : public testing::DeviceTest {
 protected:
  absl::Status Add(float* out, const float* x, const float* r, int64_t count) {
    if (cpu()) return cpu::Add(out, x, r, count), absl::OkStatus();
    return TNMT_IF_CUDA(cuda::Add(ctx(), out, x, r, count));
  }
  absl::Status BiasActivation(float* y, const float* bias, int64_t rows, int n, Activation act) {
    if (cpu()) return cpu::BiasActivation(y, bias, rows, n, act), absl::OkStatus();
    return TNMT_IF_CUDA(cuda::BiasActivation(ctx(), y, bias, rows, n, act));
  }
  absl::Status LayerNorm(float* out, const float* x, const float* r, const float* gamma, const float* beta,
                         int64_t rows, int d, float eps) {
    if (cpu()) return cpu::LayerNorm(out, x, r, gamma, beta, rows, d, eps), absl::OkStatus();
    return TNMT_IF_CUDA(cuda::LayerNorm(ctx(), out, x, r, gamma, beta, rows, d, eps));
  }
  absl::Status Softmax(float* x, int64_t rows, int n) {
    if (cpu()) return cpu::Softmax(x, rows, n), absl::OkStatus();
    return TNMT_IF_CUDA(cuda::Softmax(ctx(), x, rows, n));
  }
  absl::Status LayerNormBackward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                 const float* gamma, int64_t rows, int d, float eps) {
    if (cpu()) {
      cpu::LayerNormBackward(dx, dgamma, dbeta, dy, x, gamma, rows, d, eps);
      return absl::OkStatus();
    }
    return TNMT_IF_CUDA(cuda::LayerNormBackward(ctx(), dx, dgamma, dbeta, dy, x, gamma, rows, d, eps));
  }
  absl::Status ActivationBackward(float* dx, const float* dy, const float* pre, int64_t count,
                                  Activation act) {
    if (cpu()) return cpu::ActivationBackward(dx, dy, pre, count, act), absl::OkStatus();
    return TNMT_IF_CUDA(cuda::ActivationBackward(ctx(), dx, dy, pre, count, act));
  }
  absl::Status AccumulateColumnSum(float* db, const float* dy, int64_t rows, int n) {
    if (cpu()) return cpu::AccumulateColumnSum(db, dy, rows, n), absl::OkStatus();
    return TNMT_IF_CUDA(cuda::AccumulateColumnSum(ctx(), db, dy, rows, n));
  }

};

double TanhGelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

double TanhGeluDerivative(double x) {
  const double c = 0.7978845608028654, t = std::tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

// Bit for bit, separate and in place (out = x, out = r), as the residual additions use it.
TEST_P(ElementwiseTest, Add) {
  for (int64_t count : {int64_t{1}, int64_t{17}, int64_t{4099}, int64_t{1000003}}) {
    SCOPED_TRACE(absl::StrCat("count ", count));
    const std::vector<float> x = Random(count, 0.0f, 10.0f), r = Random(count, 0.0f, 10.0f);
    std::vector<float> want(count);
    for (int64_t i = 0; i < count; ++i) want[i] = x[i] + r[i];
    float* dx = Upload(x);
    float* dr = Upload(r);
    float* out = Alloc<float>(count);
    ASSERT_TRUE(Add(out, dx, dr, count).ok());
    ExpectSameBits(Download(out, count), want, "out");
    ASSERT_TRUE(Add(dx, dx, dr, count).ok());
    ExpectSameBits(Download(dx, count), want, "out = x");
    float* dx2 = Upload(x);
    ASSERT_TRUE(Add(dr, dx2, dr, count).ok());
    ExpectSameBits(Download(dr, count), want, "out = r");
  }
}

// ReLU bit for bit; GELU (tanh approximation) within 1e-5 absolute and relative of float64: the
// CPU's tolerance against float64 (its vectorized tanh); the GPU's tanhf is within it.
TEST_P(ElementwiseTest, BiasActivation) {
  for (auto [rows, n] : {std::pair<int, int>{1, 5}, {9, 257}, {64, 2000}}) {
    for (Activation act : {Activation::kRelu, Activation::kGelu}) {
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(absl::StrCat(ActivationName(act), " rows ", rows, " n ", n, with_bias ? " bias" : ""));
        const std::vector<float> y = Random(static_cast<size_t>(rows) * n, 0.0f, 3.0f), bias = Random(n);
        std::vector<float> relu(y.size());
        std::vector<double> gelu(y.size());
        for (int r = 0; r < rows; ++r) {
          for (int j = 0; j < n; ++j) {
            const size_t i = static_cast<size_t>(r) * n + j;
            const float v = y[i] + (with_bias ? bias[j] : 0.0f);
            relu[i] = v > 0.0f ? v : 0.0f;
            gelu[i] = TanhGelu(static_cast<double>(y[i]) + (with_bias ? bias[j] : 0.0));
          }
        }
        float* dy = Upload(y);
        ASSERT_TRUE(BiasActivation(dy, with_bias ? Upload(bias) : nullptr, rows, n, act).ok());
        const std::vector<float> got = Download(dy, y.size());
        if (act == Activation::kRelu) {
          ExpectSameBits(got, relu, "relu");
        } else {
          ExpectAllNear(got, gelu, "gelu", 1e-5, 1e-5);
        }
      }
    }
  }
}

// LayerNorm(x + r) * gamma + beta against float64, out aliasing x; eps 0.5 makes a misplaced
// eps obvious. Within 1e-4 absolute and relative: float32 sums over d <= 1030 terms (relative
// rounding up to d * 2^-24 = 6e-5 for the mean and variance) and the GPU's rsqrtf (2 ulp).
TEST_P(ElementwiseTest, LayerNorm) {
  for (auto [rows, d] : {std::pair<int, int>{1, 1}, {7, 33}, {130, 512}, {3, 1030}}) {
    for (bool residual : {true, false}) {
      for (float eps : {1e-6f, 0.5f}) {
        SCOPED_TRACE(absl::StrCat("rows ", rows, " d ", d, residual ? " with residual" : "", " eps ", eps));
        const size_t n = static_cast<size_t>(rows) * d;
        const std::vector<float> x = Random(n, 0.5f, 2.0f), r = Random(n, 0.5f, 2.0f);
        const std::vector<float> gamma = Random(d, 1.0f, 0.3f), beta = Random(d);
        std::vector<double> want(n);
        for (int i = 0; i < rows; ++i) {
          std::vector<double> v(d);
          double mean = 0.0, var = 0.0;
          for (int j = 0; j < d; ++j) {
            v[j] = static_cast<double>(x[i * d + j]) + (residual ? r[i * d + j] : 0.0);
            mean += v[j] / d;
          }
          for (int j = 0; j < d; ++j) var += (v[j] - mean) * (v[j] - mean) / d;
          for (int j = 0; j < d; ++j) {
            want[i * d + j] = (v[j] - mean) / std::sqrt(var + eps) * gamma[j] + beta[j];
          }
        }
        float* dx = Upload(x);
        ASSERT_TRUE(
            LayerNorm(dx, dx, residual ? Upload(r) : nullptr, Upload(gamma), Upload(beta), rows, d, eps)
                .ok());
        ExpectAllNear(Download(dx, n), want, "layer norm", 1e-4, 1e-4);
      }
    }
  }
}

// The biased variance with eps inside the root: x = [1, 3] has mean 2 and variance 1 (the
// unbiased one is 2); with eps = 3 the scale is 1 / sqrt(4). A constant row gives beta.
TEST_P(ElementwiseTest, LayerNormSpotValues) {
  float* out = Alloc<float>(4);
  ASSERT_TRUE(LayerNorm(out, Upload(std::vector<float>{1.0f, 3.0f}), nullptr,
                        Upload(std::vector<float>{2.0f, 4.0f}), Upload(std::vector<float>{10.0f, 20.0f}), 1,
                        2, 3.0f)
                  .ok());
  std::vector<float> got = Download(out, 2);
  EXPECT_FLOAT_EQ(got[0], 9.0f);
  EXPECT_FLOAT_EQ(got[1], 22.0f);
  const std::vector<float> beta = {0.1f, 0.2f, 0.3f, 0.4f};
  ASSERT_TRUE(LayerNorm(out, Upload(std::vector<float>(4, 5.0f)), nullptr,
                        Upload(std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}), Upload(beta), 1, 4, 1e-5f)
                  .ok());
  got = Download(out, 4);
  for (int j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(got[j], beta[j]) << j;
}

// Row softmax in place against float64, offset by +-1000 (no overflow), with -inf entries
// (exactly 0), an all -inf row (zeros) and a row with one visible entry. Within 2e-5 absolute
// and 1e-5 relative: float32 sums of up to 8000 exponentials, and the GPU's __expf
// (2 + 1.16 |x| ulp).
TEST_P(ElementwiseTest, Softmax) {
  for (auto [rows, n] : {std::pair<int, int>{1, 5}, {9, 257}, {64, 8000}, {3, 17}}) {
    for (float offset : {0.0f, 1000.0f, -1000.0f}) {
      SCOPED_TRACE(absl::StrCat("rows ", rows, " n ", n, " offset ", offset));
      std::vector<float> x = Random(static_cast<size_t>(rows) * n, 0.5f, 2.0f);
      for (float& v : x) v += offset;
      for (int j = 0; j < n; j += 3) x[j] = -INFINITY;                               // row 0: some masked
      if (rows > 1) std::fill(x.begin() + n, x.begin() + 2 * n, -INFINITY);          // row 1: all
      if (rows > 2) std::fill(x.begin() + 2 * n + 1, x.begin() + 3 * n, -INFINITY);  // row 2: one left
      std::vector<double> want(x.size());
      for (int i = 0; i < rows; ++i) {
        const float* row = x.data() + static_cast<size_t>(i) * n;
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < n; ++j) mx = std::max(mx, static_cast<double>(row[j]));
        for (int j = 0; j < n; ++j) sum += mx == -INFINITY ? 0.0 : std::exp(row[j] - mx);
        for (int j = 0; j < n; ++j) {
          want[static_cast<size_t>(i) * n + j] = mx == -INFINITY ? 0.0 : std::exp(row[j] - mx) / sum;
        }
      }
      float* dx = Upload(x);
      ASSERT_TRUE(Softmax(dx, rows, n).ok());
      const std::vector<float> got = Download(dx, x.size());
      ExpectAllNear(got, want, "softmax", 2e-5, 1e-5);
      int64_t masked_nonzero = 0;
      for (size_t i = 0; i < x.size(); ++i) masked_nonzero += x[i] == -INFINITY && got[i] != 0.0f;
      EXPECT_EQ(masked_nonzero, 0) << "masked entries not exactly 0";
    }
  }
}

// dx (written; also in place over dy) and dgamma, dbeta (accumulated onto nonzero values)
// against float64. Bounds: 2-norm relative 2e-5 and 2e-4 per element scaled by 1 + |want|:
// the GPU's bounds against the CPU (1e-5, 1e-4) plus the CPU's against float64 (within those).
TEST_P(ElementwiseTest, LayerNormBackward) {
  for (auto [rows, d] : {std::pair<int64_t, int>{1, 3}, {7, 5}, {65, 37}, {130, 512}, {300, 1023}}) {
    SCOPED_TRACE(absl::StrCat("rows ", rows, " d ", d));
    const size_t n = static_cast<size_t>(rows) * d;
    const float eps = 1e-5f;
    const std::vector<float> x = Random(n, 0.5f, 2.0f), dy = Random(n), gamma = Random(d, 1.0f, 0.3f);
    const std::vector<float> dgamma0 = Random(d), dbeta0 = Random(d);
    std::vector<double> dx_want(n), dgamma_want(dgamma0.begin(), dgamma0.end()),
        dbeta_want(dbeta0.begin(), dbeta0.end());
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * d;
      const float* dyr = dy.data() + r * d;
      double mean = 0.0, var = 0.0;
      for (int j = 0; j < d; ++j) mean += static_cast<double>(xr[j]) / d;
      for (int j = 0; j < d; ++j) var += (xr[j] - mean) * (xr[j] - mean) / d;
      const double rstd = 1.0 / std::sqrt(var + eps);
      double mean_g = 0.0, mean_gx = 0.0;
      for (int j = 0; j < d; ++j) {
        const double xhat = (xr[j] - mean) * rstd, g = static_cast<double>(dyr[j]) * gamma[j];
        mean_g += g / d;
        mean_gx += g * xhat / d;
        dgamma_want[j] += dyr[j] * xhat;
        dbeta_want[j] += dyr[j];
      }
      for (int j = 0; j < d; ++j) {
        const double xhat = (xr[j] - mean) * rstd;
        dx_want[r * d + j] = rstd * (static_cast<double>(dyr[j]) * gamma[j] - mean_g - xhat * mean_gx);
      }
    }
    std::vector<float> first[3];
    for (bool alias : {false, true}) {
      SCOPED_TRACE(alias ? "dx aliases dy" : "separate dx");
      float* ddy = Upload(dy);
      float* ddx = alias ? ddy : Alloc<float>(n);
      float* ddgamma = Upload(dgamma0);
      float* ddbeta = Upload(dbeta0);
      ASSERT_TRUE(
          LayerNormBackward(ddx, ddgamma, ddbeta, ddy, Upload(x), Upload(gamma), rows, d, eps).ok());
      const std::vector<float> got[3] = {Download(ddx, n), Download(ddgamma, d), Download(ddbeta, d)};
      EXPECT_LE(RelativeError(got[0], dx_want), 2e-5);
      EXPECT_LE(MaxScaledError(got[0], dx_want), 2e-4);
      EXPECT_LE(RelativeError(got[1], dgamma_want), 2e-5);
      EXPECT_LE(RelativeError(got[2], dbeta_want), 2e-5);
      for (int i = 0; i < 3; ++i) {
        if (alias)
          ExpectSameBits(got[i], first[i], absl::StrCat("output ", i, " in place"));
        else
          first[i] = got[i];
      }
    }
  }
}

// dx = dy * act'(pre), written and in place: ReLU bit for bit; GELU against float64 within a
// 2-norm relative 3e-6 and 6e-5 per element scaled by 1 + |want| (1 - tanh(u)^2 cancels in
// float for |u| of a few units: the CPU is within 1.3e-6 and 1.4e-7 of float64, the GPU's
// tanhf within 5e-5 and 2e-6 of the CPU).
TEST_P(ElementwiseTest, ActivationBackward) {
  for (Activation act : {Activation::kRelu, Activation::kGelu}) {
    for (int64_t count : {int64_t{1}, int64_t{1003}, int64_t{100003}}) {
      SCOPED_TRACE(absl::StrCat(ActivationName(act), " count ", count));
      const std::vector<float> pre = Random(count, 0.0f, 3.0f), dy = Random(count);
      std::vector<float> relu(count);
      std::vector<double> gelu(count);
      for (int64_t i = 0; i < count; ++i) {
        relu[i] = pre[i] > 0.0f ? dy[i] : 0.0f;
        gelu[i] = dy[i] * TanhGeluDerivative(pre[i]);
      }
      float* dpre = Upload(pre);
      float* dx = Alloc<float>(count);
      ASSERT_TRUE(ActivationBackward(dx, Upload(dy), dpre, count, act).ok());
      const std::vector<float> got = Download(dx, count);
      if (act == Activation::kRelu) {
        ExpectSameBits(got, relu, "relu");
      } else {
        EXPECT_LE(RelativeError(got, gelu), 3e-6);
        EXPECT_LE(MaxScaledError(got, gelu), 6e-5);
      }
      float* ddy = Upload(dy);
      ASSERT_TRUE(ActivationBackward(ddy, ddy, dpre, count, act).ok());
      ExpectSameBits(Download(ddy, count), got, "in place");
    }
  }
}

// db += column sums of dy against float64 (2-norm relative 2e-5: float32 sums of up to 1000
// rows, chunked on the GPU, blocked on the CPU), twice the same bits.
TEST_P(ElementwiseTest, AccumulateColumnSum) {
  for (auto [rows, n] : {std::pair<int64_t, int>{1, 1}, {65, 7}, {200, 513}, {1000, 3}, {129, 64}}) {
    SCOPED_TRACE(absl::StrCat("rows ", rows, " n ", n));
    const std::vector<float> dy = Random(static_cast<size_t>(rows) * n), db0 = Random(n);
    std::vector<double> want(db0.begin(), db0.end());
    for (int64_t r = 0; r < rows; ++r) {
      for (int j = 0; j < n; ++j) want[j] += dy[r * n + j];
    }
    const float* ddy = Upload(dy);
    std::vector<float> runs[2];
    for (auto& got : runs) {
      float* ddb = Upload(db0);
      ASSERT_TRUE(AccumulateColumnSum(ddb, ddy, rows, n).ok());
      got = Download(ddb, n);
      EXPECT_LE(RelativeError(got, want), 2e-5);
    }
    ExpectSameBits(runs[1], runs[0], "second run");
  }
}

TNMT_INSTANTIATE_DEVICE_TEST(ElementwiseTest);

}  // namespace
}  // namespace tnmt::kernels
