// Checks the elementwise/row-wise CPU kernels against naive double-precision reference loops.
// LayerNorm and LogSumExp run on every kernel path the CPU has (portable, AVX2, AVX-512), and
// the AVX2 and AVX-512 paths must agree bit for bit. Add, Softmax and LayerNorm's contract
// (spot values, eps) are tested once for every device in
// kernels/testing/elementwise_devices_test.cc; here what only the CPU has: its kernel paths,
// every activation, AddBias, LayerNormStats, LogSumExp and the half-precision conversions.
#include "kernels/cpu/elementwise.h"

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/test_util.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace tnmt::kernels::cpu {
namespace {

using testing::Random;

constexpr double kTol = 1e-5;  // absolute and relative tolerance for float32 results
constexpr float kInf = std::numeric_limits<float>::infinity();

// The shared comparison with this file's default tolerances.
void ExpectAllNear(const std::vector<float>& got, const std::vector<double>& want,
                   const std::string& what, double abs = kTol, double rel = kTol) {
  testing::ExpectAllNear(got, want, what, abs, rel);
}

std::string Dims(int64_t rows, int n) {
  return "rows=" + std::to_string(rows) + " n=" + std::to_string(n);
}

struct Dim {
  int64_t rows;
  int n;
};
const Dim kDims[] = {{1, 1}, {1, 3}, {3, 7}, {7, 17}, {5, 33}, {2, 65}, {3, 130}, {2, 1024}};

// ---------------------------------------------------------------- BiasActivation / AddBias

const double kPi = std::acos(-1.0);

double RefGelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x)));
}

double ErfGelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

double RefActivation(double v, Activation act) {
  switch (act) {
    case Activation::kRelu: return std::max(v, 0.0);
    case Activation::kGelu: return RefGelu(v);
    case Activation::kGeluErf: return ErfGelu(v);
    case Activation::kSwish: return v / (1.0 + std::exp(-v));
  }
  return 0.0;
}

TEST(BiasActivation, EveryActivationWithAndWithoutBias) {
  std::mt19937 rng(1);
  for (const Dim& s : kDims) {
    for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kGeluErf, Activation::kSwish}) {
      for (bool with_bias : {true, false}) {
        const std::vector<float> x = Random(s.rows * s.n, rng, -5.0f, 5.0f);
        const std::vector<float> bias = Random(s.n, rng);
        std::vector<double> want(x.size());
        for (int64_t r = 0; r < s.rows; ++r) {
          for (int j = 0; j < s.n; ++j) {
            const double v = static_cast<double>(x[r * s.n + j]) + (with_bias ? bias[j] : 0.0);
            want[r * s.n + j] = RefActivation(v, act);
          }
        }
        std::vector<float> y = x;
        BiasActivation(y.data(), with_bias ? bias.data() : nullptr, s.rows, s.n, act);
        ExpectAllNear(y, want,
                      std::string(ActivationName(act)) + " " +
                          (with_bias ? "bias " : "no-bias ") + Dims(s.rows, s.n));
      }
    }
  }
}

TEST(BiasActivation, GeluIsTheTanhApproximation) {
  // At x = 1 the tanh form gives 0.841192 and the exact erf form 0.841345: tell them apart.
  float y[3] = {1.0f, -1.0f, 0.0f};
  BiasActivation(y, nullptr, 1, 3, Activation::kGelu);
  EXPECT_NEAR(y[0], 0.8411920, 1e-6);
  EXPECT_NEAR(y[1], -0.1588080, 1e-6);
  EXPECT_GT(std::fabs(y[0] - ErfGelu(1.0)), 1e-4);
  EXPECT_EQ(y[2], 0.0f);
}

TEST(AddBias, AddsPerColumnAndNullIsNoOp) {
  std::mt19937 rng(2);
  for (const Dim& s : kDims) {
    const std::vector<float> x = Random(s.rows * s.n, rng);
    const std::vector<float> bias = Random(s.n, rng);
    std::vector<double> want(x.size());
    for (int64_t r = 0; r < s.rows; ++r)
      for (int j = 0; j < s.n; ++j)
        want[r * s.n + j] = static_cast<double>(x[r * s.n + j]) + bias[j];
    std::vector<float> y = x;
    AddBias(y.data(), bias.data(), s.rows, s.n);
    ExpectAllNear(y, want, "AddBias " + Dims(s.rows, s.n));

    y = x;
    AddBias(y.data(), nullptr, s.rows, s.n);
    EXPECT_EQ(y, x) << "null bias must leave y unchanged";
  }
}

// ---------------------------------------------------------------- LayerNorm

std::vector<double> RefLayerNorm(const std::vector<float>& x, const std::vector<float>* r,
                                 const std::vector<float>& gamma, const std::vector<float>& beta,
                                 int64_t rows, int d, double eps) {
  std::vector<double> out(rows * d);
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<double> v(d);
    double mean = 0.0;
    for (int j = 0; j < d; ++j) {
      v[j] = static_cast<double>(x[i * d + j]) + (r ? (*r)[i * d + j] : 0.0f);
      mean += v[j];
    }
    mean /= d;
    double var = 0.0;
    for (int j = 0; j < d; ++j) var += (v[j] - mean) * (v[j] - mean);
    var /= d;  // biased
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int j = 0; j < d; ++j) out[i * d + j] = (v[j] - mean) * inv * gamma[j] + beta[j];
  }
  return out;
}

// The kernel paths this CPU has.
std::vector<CpuIsa> Paths() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (isa <= DetectedIsa()) out.push_back(isa);
  }
  return out;
}

void CheckLayerNorm();
void CheckLogSumExp();

TEST(LayerNorm, WithAndWithoutResidualAndInPlace) {
  for (CpuIsa isa : Paths()) {
    SCOPED_TRACE(IsaName(isa));
    SetIsaForTesting(isa);
    CheckLayerNorm();
  }
  SetIsaForTesting(CpuIsa::kAvx512);
}

void CheckLayerNorm() {
  std::mt19937 rng(4);
  for (const Dim& s : kDims) {
    for (float eps : {1e-5f, 1e-6f, 0.5f}) {  // 0.5 makes a misplaced eps obvious
      const int64_t rows = s.rows;
      const int d = s.n;
      // An offset in x makes the mean matter; gamma/beta random so per-column use is checked.
      const std::vector<float> x = Random(rows * d, rng, 1.0f, 4.0f);
      const std::vector<float> r = Random(rows * d, rng, -2.0f, 2.0f);
      const std::vector<float> gamma = Random(d, rng, 0.5f, 1.5f);
      const std::vector<float> beta = Random(d, rng, -0.5f, 0.5f);
      const std::string what = "LayerNorm " + Dims(rows, d) + " eps=" + std::to_string(eps);

      const std::vector<double> want_plain = RefLayerNorm(x, nullptr, gamma, beta, rows, d, eps);
      const std::vector<double> want_res = RefLayerNorm(x, &r, gamma, beta, rows, d, eps);

      std::vector<float> out(rows * d, 123.0f);
      LayerNorm(out.data(), x.data(), nullptr, gamma.data(), beta.data(), rows, d, eps);
      ExpectAllNear(out, want_plain, what + " r=null");

      LayerNorm(out.data(), x.data(), r.data(), gamma.data(), beta.data(), rows, d, eps);
      ExpectAllNear(out, want_res, what + " with r");

      std::vector<float> inplace = x;
      LayerNorm(inplace.data(), inplace.data(), nullptr, gamma.data(), beta.data(), rows, d, eps);
      ExpectAllNear(inplace, want_plain, what + " r=null out==x");

      inplace = x;
      LayerNorm(inplace.data(), inplace.data(), r.data(), gamma.data(), beta.data(), rows, d, eps);
      ExpectAllNear(inplace, want_res, what + " with r out==x");
    }
  }
}

// LayerNormStats reports, on every path, exactly the mean and 1/std LayerNorm normalized with:
// with gamma 1 and beta 0 the output is (x - mean) * rstd, bit for bit; and they are the
// row's mean and 1/std to float rounding.
TEST(LayerNorm, StatsAreThoseTheForwardUsed) {
  std::mt19937 rng(8);
  for (CpuIsa isa : Paths()) {
    SCOPED_TRACE(IsaName(isa));
    SetIsaForTesting(isa);
    for (const Dim& s : kDims) {
      const int64_t rows = s.rows;
      const int d = s.n;
      const float eps = 1e-5f;
      const std::vector<float> x = Random(rows * d, rng, 1.0f, 4.0f);
      const std::vector<float> ones(d, 1.0f), zeros(d, 0.0f);
      std::vector<float> y(rows * d), stats(2 * rows, -1.0f);
      LayerNorm(y.data(), x.data(), nullptr, ones.data(), zeros.data(), rows, d, eps);
      LayerNormStats(stats.data(), x.data(), rows, d, eps);
      int bad = 0;
      for (int64_t i = 0; i < rows; ++i) {
        const float mean = stats[2 * i], rstd = stats[2 * i + 1];
        double ref_mean = 0.0, ref_var = 0.0;
        for (int j = 0; j < d; ++j) ref_mean += x[i * d + j];
        ref_mean /= d;
        for (int j = 0; j < d; ++j) ref_var += (x[i * d + j] - ref_mean) * (x[i * d + j] - ref_mean);
        const double ref_rstd = 1.0 / std::sqrt(ref_var / d + eps);
        EXPECT_NEAR(mean, ref_mean, 1e-5 * std::fabs(ref_mean)) << Dims(rows, d) << " row " << i;
        EXPECT_NEAR(rstd, ref_rstd, 1e-4 * ref_rstd) << Dims(rows, d) << " row " << i;
        for (int j = 0; j < d; ++j) {
          const float want = (x[i * d + j] - mean) * rstd;
          if (std::memcmp(&want, &y[i * d + j], sizeof(float)) != 0 && ++bad <= 5) {
            ADD_FAILURE() << Dims(rows, d) << " (" << i << ", " << j << "): LayerNorm " << y[i * d + j]
                          << ", from the stats " << want;
          }
        }
      }
      EXPECT_EQ(bad, 0) << Dims(rows, d);
    }
  }
  SetIsaForTesting(CpuIsa::kAvx512);
}

// ---------------------------------------------------------------- LogSumExp

TEST(LogSumExp, RandomRowsAndLargeMagnitudes) {
  for (CpuIsa isa : Paths()) {
    SCOPED_TRACE(IsaName(isa));
    SetIsaForTesting(isa);
    CheckLogSumExp();
  }
  SetIsaForTesting(CpuIsa::kAvx512);
}

void CheckLogSumExp() {
  std::mt19937 rng(7);
  for (const Dim& s : kDims) {
    for (float offset : {0.0f, 1000.0f, -1000.0f, 30000.0f}) {
      std::vector<float> x = Random(s.rows * s.n, rng, -8.0f, 8.0f);
      for (float& v : x) v += offset;
      std::vector<double> want(s.rows);
      for (int64_t i = 0; i < s.rows; ++i) {
        double mx = -INFINITY;
        for (int j = 0; j < s.n; ++j) mx = std::max(mx, static_cast<double>(x[i * s.n + j]));
        double sum = 0.0;
        for (int j = 0; j < s.n; ++j) sum += std::exp(x[i * s.n + j] - mx);
        want[i] = mx + std::log(sum);
      }
      std::vector<float> lse(s.rows, NAN);
      LogSumExp(lse.data(), x.data(), s.rows, s.n);
      // A float near 3e4 has an ulp of 2e-3; allow a few ulps relative, 1e-5 absolute.
      ExpectAllNear(lse, want, "LogSumExp " + Dims(s.rows, s.n) + " offset=" +
                                   std::to_string(offset), kTol, 4 * FLT_EPSILON);
    }
  }
}

TEST(LogSumExp, KnownValuesAndMaskedEntries) {
  const float x[8] = {0.0f, 0.0f, 0.0f, 0.0f,  // log(4)
                      -kInf, 2.0f, -kInf, -kInf};  // masked entries contribute nothing
  for (CpuIsa isa : Paths()) {
    SetIsaForTesting(isa);
    float lse[2];
    LogSumExp(lse, x, 2, 4);
    EXPECT_NEAR(lse[0], std::log(4.0), 1e-6) << IsaName(isa);
    EXPECT_EQ(lse[1], 2.0f) << IsaName(isa);
  }
  SetIsaForTesting(CpuIsa::kAvx512);
}

// The AVX2 kernels compute what the AVX-512 ones compute, bit for bit, at widths around the
// 16-lane chunks (with and without a residual, in place, and over large offsets).
TEST(RowKernelPaths, Avx2EqualsAvx512BitForBit) {
  if (DetectedIsa() < CpuIsa::kAvx512) GTEST_SKIP() << "needs a CPU with AVX-512 (and so AVX2)";
  std::mt19937 rng(99);
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
  };
  for (int n : {1, 5, 8, 15, 16, 17, 31, 33, 64, 100, 256, 257, 512, 1000, 8000}) {
    const int64_t rows = 3;
    const std::vector<float> x = Random(rows * n, rng, -6.0f, 9.0f);
    const std::vector<float> r = Random(rows * n, rng, -2.0f, 2.0f);
    const std::vector<float> gamma = Random(n, rng, 0.5f, 1.5f);
    const std::vector<float> beta = Random(n, rng, -0.5f, 0.5f);
    std::vector<float> out[2], inplace[2], lse[2];
    for (int p = 0; p < 2; ++p) {
      SetIsaForTesting(p == 0 ? CpuIsa::kAvx512 : CpuIsa::kAvx2);
      out[p].assign(rows * n, 0.0f);
      LayerNorm(out[p].data(), x.data(), r.data(), gamma.data(), beta.data(), rows, n, 1e-6f);
      inplace[p] = x;
      LayerNorm(inplace[p].data(), inplace[p].data(), nullptr, gamma.data(), beta.data(), rows, n, 1e-5f);
      lse[p].assign(rows, 0.0f);
      std::vector<float> shifted = x;
      for (float& v : shifted) v = 40.0f * v - 100.0f;
      LogSumExp(lse[p].data(), shifted.data(), rows, n);
    }
    SetIsaForTesting(CpuIsa::kAvx512);
    EXPECT_TRUE(same(out[0], out[1])) << "LayerNorm with residual, n=" << n;
    EXPECT_TRUE(same(inplace[0], inplace[1])) << "LayerNorm in place, n=" << n;
    EXPECT_TRUE(same(lse[0], lse[1])) << "LogSumExp, n=" << n;
  }
}

// ---------------------------------------------------------------- half / bfloat16

// Independent decoder: value = (-1)^s * 2^(e - bias) * (1 + m / 2^mant_bits), subnormals and
// specials handled explicitly, computed with ldexp in double.
double DecodeFloat(uint32_t bits, int exp_bits, int mant_bits) {
  const uint32_t sign = (bits >> (exp_bits + mant_bits)) & 1;
  const uint32_t exp = (bits >> mant_bits) & ((1u << exp_bits) - 1);
  const uint32_t mant = bits & ((1u << mant_bits) - 1);
  const int bias = (1 << (exp_bits - 1)) - 1;
  double v;
  if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), 1 - bias - mant_bits);
  } else if (exp == (1u << exp_bits) - 1) {
    v = mant == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(mant), -mant_bits), exp - bias);
  }
  return sign ? -v : v;
}

void CheckAllPatterns(void (*convert)(float*, const uint16_t*, int64_t), int exp_bits,
                      int mant_bits, const char* name) {
  std::vector<uint16_t> in(65536);
  for (uint32_t i = 0; i < 65536; ++i) in[i] = static_cast<uint16_t>(i);
  std::vector<float> out(65536);
  convert(out.data(), in.data(), 65536);
  int failures = 0;
  for (uint32_t i = 0; i < 65536 && failures < 5; ++i) {
    const double want = DecodeFloat(i, exp_bits, mant_bits);
    const bool ok = std::isnan(want) ? std::isnan(out[i])
                                     : (out[i] == want && std::signbit(out[i]) == std::signbit(want));
    if (!ok) {
      ++failures;
      ADD_FAILURE() << name << "(0x" << std::hex << i << std::dec << ") = " << out[i]
                    << ", want " << want;
    }
  }
}

TEST(HalfToFloat, AllBitPatterns) { CheckAllPatterns(HalfToFloat, 5, 10, "HalfToFloat"); }

TEST(HalfToFloat, SpotValues) {
  const uint16_t in[] = {0x0000, 0x8000, 0x3c00, 0xc000, 0x7bff, 0xfbff, 0x0001,
                         0x03ff, 0x0400, 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x3555};
  float out[14];
  HalfToFloat(out, in, 14);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_FALSE(std::signbit(out[0]));
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_TRUE(std::signbit(out[1]));  // -0 keeps its sign
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_EQ(out[3], -2.0f);
  EXPECT_EQ(out[4], 65504.0f);  // largest half
  EXPECT_EQ(out[5], -65504.0f);
  EXPECT_EQ(out[6], std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(out[7], std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(out[8], std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(out[9], kInf);
  EXPECT_EQ(out[10], -kInf);
  EXPECT_TRUE(std::isnan(out[11]));
  EXPECT_TRUE(std::isnan(out[12]));
  EXPECT_EQ(out[13], 0.333251953125f);
}

TEST(BFloat16ToFloat, AllBitPatterns) { CheckAllPatterns(BFloat16ToFloat, 8, 7, "BFloat16ToFloat"); }

TEST(BFloat16ToFloat, SpotValues) {
  const uint16_t in[] = {0x0000, 0x8000, 0x3f80, 0xc000, 0x4049, 0x7f80, 0xff80, 0x7fc0, 0x0001};
  float out[9];
  BFloat16ToFloat(out, in, 9);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_TRUE(std::signbit(out[1]));
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_EQ(out[3], -2.0f);
  EXPECT_EQ(out[4], 3.140625f);
  EXPECT_EQ(out[5], kInf);
  EXPECT_EQ(out[6], -kInf);
  EXPECT_TRUE(std::isnan(out[7]));
  EXPECT_EQ(out[8], std::ldexp(1.0f, -133));  // bfloat16 subnormal
}

}  // namespace
}  // namespace tnmt::kernels::cpu
