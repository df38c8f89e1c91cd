// GemmBf16 against a double-accumulating loop over bfloat16-rounded operands, in all four
// storage layouts, with padded strides, odd k, several k blocks and row blocks; the AVX-512
// BF16 kernel against the portable path, and its independence of the thread count and of m.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"

namespace tnmt::kernels::cpu {
namespace {

float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

TEST(RoundToBfloat16Test, RoundsToNearestTiesToEven) {
  EXPECT_EQ(RoundToBfloat16(1.0f), 1.0f);
  EXPECT_EQ(RoundToBfloat16(1.0f + std::ldexp(1.0f, -10)), 1.0f);                        // below half an ulp
  EXPECT_EQ(RoundToBfloat16(1.0f + std::ldexp(1.0f, -8)), 1.0f);                         // a tie: to even
  EXPECT_EQ(RoundToBfloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));  // a tie: to even
  EXPECT_EQ(RoundToBfloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -12)), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(RoundToBfloat16(-2.5f), -2.5f);
  EXPECT_EQ(RoundToBfloat16(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(RoundToBfloat16(-std::numeric_limits<float>::infinity()), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(RoundToBfloat16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(RoundToBfloat16(FromBits(0x7f800001u))));  // a NaN whose rounding would carry into inf
}

struct Case {
  bool trans_a, trans_b;
  int m, n, k;
};

std::string Name(const Case& c) {
  return absl::StrCat(c.trans_a ? "T" : "N", c.trans_b ? "T" : "N", " m=", c.m, " n=", c.n, " k=", c.k);
}

// Operands stored as GemmBf16 reads them, with 3 elements of padding per row.
struct Operands {
  std::vector<float> a, b;
  int lda, ldb;
  float A(const Case& c, int i, int p) const {
    return c.trans_a ? a[static_cast<size_t>(p) * lda + i] : a[static_cast<size_t>(i) * lda + p];
  }
  float B(const Case& c, int p, int j) const {
    return c.trans_b ? b[static_cast<size_t>(j) * ldb + p] : b[static_cast<size_t>(p) * ldb + j];
  }
};

Operands MakeOperands(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Operands o;
  o.lda = (c.trans_a ? c.m : c.k) + 3;
  o.ldb = (c.trans_b ? c.k : c.n) + 3;
  o.a.resize(static_cast<size_t>(c.trans_a ? c.k : c.m) * o.lda);
  o.b.resize(static_cast<size_t>(c.trans_b ? c.n : c.k) * o.ldb);
  for (float& x : o.a) x = dist(rng);
  for (float& x : o.b) x = dist(rng);
  return o;
}

// c with row stride n + 5 (padding 7.0), optionally NaN-poisoned or random in the logical part.
std::vector<float> RunGemm(const Case& c, const Operands& o, bool accumulate, const std::vector<float>& c0,
                           const float* bias = nullptr) {
  std::vector<float> out = c0;
  GemmBf16(c.trans_a, c.trans_b, c.m, c.n, c.k, o.a.data(), o.lda, o.b.data(), o.ldb, bias, accumulate, out.data(),
           c.n + 5);
  return out;
}

void CheckAgainstReference(const Case& c, bool accumulate, bool with_bias) {
  SCOPED_TRACE(Name(c) + (accumulate ? " accumulate" : "") + (with_bias ? " bias" : ""));
  const Operands o = MakeOperands(c, 1234 + c.m * 7 + c.n * 13 + c.k);
  const int ldc = c.n + 5;
  std::vector<float> c0(static_cast<size_t>(c.m) * ldc, 7.0f);
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < c.n; ++j) {
      c0[static_cast<size_t>(i) * ldc + j] = accumulate ? dist(rng) : std::numeric_limits<float>::quiet_NaN();
    }
  }
  std::vector<float> bias(c.n);
  for (float& x : bias) x = dist(rng);
  const std::vector<float> got = RunGemm(c, o, accumulate, c0, with_bias ? bias.data() : nullptr);
  int bad = 0;
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < ldc; ++j) {
      const size_t at = static_cast<size_t>(i) * ldc + j;
      if (j >= c.n) {
        if (got[at] != 7.0f && ++bad <= 5) ADD_FAILURE() << "padding at (" << i << ", " << j << ") changed";
        continue;
      }
      double want = (accumulate ? c0[at] : 0.0) + (with_bias ? bias[j] : 0.0), size = std::fabs(want);
      for (int p = 0; p < c.k; ++p) {
        const double prod = static_cast<double>(RoundToBfloat16(o.A(c, i, p))) * RoundToBfloat16(o.B(c, p, j));
        want += prod;
        size += std::fabs(prod);
      }
      // float32 sums of k + 1 terms of random sign: errors grow like sqrt(k) ulps of the
      // partial sums, far below this bound, while skipping the operands' rounding (a relative
      // 2^-9 per product) would exceed it many times over.
      const double tol = 2.4e-7 * std::sqrt(c.k + 2.0) * size + 1e-30;
      if (!(std::fabs(got[at] - want) <= tol) && ++bad <= 5) {
        ADD_FAILURE() << "c(" << i << ", " << j << ") = " << got[at] << ", want " << want << " +- " << tol;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> v;
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (Case s : {Case{false, false, 1, 1, 1}, Case{false, false, 3, 5, 7}, Case{false, false, 14, 32, 2},
                       Case{false, false, 15, 33, 17}, Case{false, false, 29, 47, 1101},  // two k blocks, odd tail
                       Case{false, false, 470, 40, 33},                                   // two row blocks
                       Case{false, false, 37, 70, 129},
                       Case{false, false, 33, 20, 40}}) {                                  // AMX: 32 rows + 1
          s.trans_a = ta;
          s.trans_b = tb;
          v.push_back(s);
        }
      }
    }
    return v;
  }();
  return cases;
}

// The kernels this CPU runs, as whether AMX may be used: the AMX-BF16 kernel where the CPU has it,
// then the AVX-512 BF16 one (or the portable path).
std::vector<bool> AmxSettings() {
  if (HasAmxBf16()) return {true, false};
  return {false};
}

TEST(GemmBf16Test, MatchesRoundedReference) {
  for (bool amx : AmxSettings()) {
    SetAmxForTesting(amx);
    SCOPED_TRACE(UseAmxBf16() ? "AMX-BF16 kernel" : "AVX-512 BF16 kernel or portable path");
    for (const Case& c : Cases()) {
      CheckAgainstReference(c, /*accumulate=*/false, /*with_bias=*/false);
      CheckAgainstReference(c, /*accumulate=*/true, /*with_bias=*/false);
      CheckAgainstReference(c, /*accumulate=*/false, /*with_bias=*/true);
      CheckAgainstReference(c, /*accumulate=*/true, /*with_bias=*/true);
    }
  }
  SetAmxForTesting(true);
}

TEST(GemmBf16Test, MatchesRoundedReferenceOnThePortablePath) {
  SetIsaForTesting(CpuIsa::kAvx2);
  ASSERT_FALSE(HasBf16Gemm());
  for (const Case& c : Cases()) {
    CheckAgainstReference(c, /*accumulate=*/true, /*with_bias=*/false);
    CheckAgainstReference(c, /*accumulate=*/false, /*with_bias=*/true);
  }
  SetIsaForTesting(CpuIsa::kAvx512);
}

TEST(GemmBf16Test, RoundsTheOperands) {
  // 1 + 2^-10 is 1 in bfloat16; float32 arithmetic would give 1 + 2^-10 exactly.
  const float a = 1.0f + std::ldexp(1.0f, -10), b = 1.0f;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      float c = -5.0f;
      GemmBf16(ta, tb, 1, 1, 1, &a, 1, &b, 1, nullptr, /*accumulate=*/false, &c, 1);
      EXPECT_EQ(c, 1.0f) << ta << tb;
    }
  }
}

TEST(GemmBf16Test, EmptyKGivesTheBiasAndC) {
  const float bias[3] = {1.0f, -2.0f, 0.5f};
  float c[3] = {std::numeric_limits<float>::quiet_NaN(), 4.0f, 0.0f};
  GemmBf16(false, true, 1, 3, 0, nullptr, 1, nullptr, 1, bias, /*accumulate=*/false, c, 3);
  EXPECT_EQ(c[0], 1.0f);
  EXPECT_EQ(c[1], -2.0f);
  GemmBf16(false, true, 1, 3, 0, nullptr, 1, nullptr, 1, bias, /*accumulate=*/true, c, 3);
  EXPECT_EQ(c[1], -4.0f);
  EXPECT_EQ(c[2], 1.0f);
}

// GemmBf16A (a given as bfloat16 bits) gives GemmBf16's bits on the same values as float32, on
// every path (AMX packing from the bfloat16 values, the others through a float32 copy): odd k,
// two k blocks, row strides past the logical width (what lies there must not be read).
TEST(GemmBf16Test, Bfloat16LeftOperandGivesTheFloatOperandsResult) {
  std::vector<bool> amx_settings = AmxSettings();
  for (bool amx : amx_settings) {
    SetAmxForTesting(amx);
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (const Case& shape : {Case{false, false, 37, 70, 129}, Case{false, false, 33, 20, 1101},
                                  Case{false, false, 300, 45, 64}, Case{false, false, 5, 3, 1}}) {
          Case c = shape;
          c.trans_a = ta;
          c.trans_b = tb;
          SCOPED_TRACE(Name(c) + (UseAmxBf16() ? " AMX" : ""));
          Operands o = MakeOperands(c, 4321 + c.k);
          // a's values made bfloat16 (none denormal); the padding past each row holds NaN in
          // the float copy and NaN bits in the bfloat16 one.
          std::vector<uint16_t> a16(o.a.size());
          const int width = c.trans_a ? c.m : c.k;
          for (size_t at = 0; at < o.a.size(); ++at) {
            float x = RoundToBfloat16(o.a[at]);
            if (static_cast<int>(at % o.lda) >= width) x = std::numeric_limits<float>::quiet_NaN();
            o.a[at] = x;
            uint32_t bits;
            std::memcpy(&bits, &x, sizeof(bits));
            a16[at] = static_cast<uint16_t>(bits >> 16);
          }
          std::vector<float> bias(c.n);
          for (int j = 0; j < c.n; ++j) bias[j] = 0.25f * (j % 7) - 0.5f;
          for (bool accumulate : {false, true}) {
            const std::vector<float> c0(static_cast<size_t>(c.m) * (c.n + 5), 0.75f);
            const std::vector<float> want = RunGemm(c, o, accumulate, c0, bias.data());
            std::vector<float> got = c0;
            GemmBf16A(c.trans_a, c.trans_b, c.m, c.n, c.k, a16.data(), o.lda, o.b.data(), o.ldb, bias.data(),
                      accumulate, got.data(), c.n + 5);
            EXPECT_EQ(got, want) << (accumulate ? "accumulate" : "");
          }
        }
      }
    }
  }
  SetAmxForTesting(true);
}

TEST(GemmBf16Test, KernelResultsDoNotDependOnThreadsOrRows) {
  if (!HasBf16Gemm()) GTEST_SKIP() << "this CPU has no AVX-512 BF16 (the portable path is tested above)";
  // Two k blocks and several row blocks; 300 rows: at two threads, each thread takes its own rows.
  // The layouts the trainer uses: NT (forward), NN (input gradients), TN (weight gradients).
  for (bool amx : AmxSettings()) {
    SetAmxForTesting(amx);
    for (const Case& c : {Case{false, true, 300, 200, 1100}, Case{false, false, 300, 200, 1100},
                          Case{true, false, 300, 200, 1100}}) {
      SCOPED_TRACE(testing::Message() << (UseAmxBf16() ? "AMX " : "AVX-512 ") << "trans_a " << c.trans_a
                                      << " trans_b " << c.trans_b);
      const Operands o = MakeOperands(c, 7);
      const std::vector<float> zero(static_cast<size_t>(c.m) * (c.n + 5), 0.0f);
      SetComputeThreads(1);
      const std::vector<float> one = RunGemm(c, o, false, zero);
      SetComputeThreads(2);
      const std::vector<float> two = RunGemm(c, o, false, zero);
      EXPECT_EQ(one, two);
      // Rows 101..113 alone (a 13-row call: the threads split the panels) give the same bits as
      // inside the 300-row call.
      const int first = 101, rows = 13;
      std::vector<float> part(static_cast<size_t>(rows) * (c.n + 5), 0.0f);
      const float* a_rows = o.a.data() + (c.trans_a ? static_cast<size_t>(first) : static_cast<size_t>(first) * o.lda);
      GemmBf16(c.trans_a, c.trans_b, rows, c.n, c.k, a_rows, o.lda, o.b.data(), o.ldb, nullptr, false, part.data(),
               c.n + 5);
      for (int i = 0; i < rows; ++i) {
        for (int j = 0; j < c.n; ++j) {
          ASSERT_EQ(part[static_cast<size_t>(i) * (c.n + 5) + j], one[static_cast<size_t>(first + i) * (c.n + 5) + j])
              << i << "," << j;
        }
      }
    }
  }
  SetAmxForTesting(true);
  SetComputeThreads(1);
}

}  // namespace
}  // namespace tnmt::kernels::cpu
