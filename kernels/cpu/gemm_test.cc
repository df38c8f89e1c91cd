// Checks GemmNT/GemmNN/GemmTN against a naive double-accumulating loop, with padded strides.
#include "kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include "kernels/activation.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace tnmt::kernels::cpu {
namespace {

enum class Op { kNT, kNN, kTN };

const char* Name(Op op) {
  switch (op) {
    case Op::kNT: return "GemmNT";
    case Op::kNN: return "GemmNN";
    case Op::kTN: return "GemmTN";
  }
  return "?";
}

void Call(Op op, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc) {
  switch (op) {
    case Op::kNT: GemmNT(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); break;
    case Op::kNN: GemmNN(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); break;
    case Op::kTN: GemmTN(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); break;
  }
}

// Logical A(i, p) and B(p, j) for each storage layout (see gemm.h).
float A(Op op, const std::vector<float>& a, int lda, int i, int p) {
  return op == Op::kTN ? a[static_cast<size_t>(p) * lda + i] : a[static_cast<size_t>(i) * lda + p];
}
float B(Op op, const std::vector<float>& b, int ldb, int p, int j) {
  return op == Op::kNT ? b[static_cast<size_t>(j) * ldb + p] : b[static_cast<size_t>(p) * ldb + j];
}

std::vector<float> Random(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

struct Shape {
  int m, n, k;
};

// Runs one GEMM with row strides padded by `pad` elements and checks every element of c:
// logical entries against the double reference, padding entries unchanged.
void CheckGemm(Op op, Shape s, int pad, float alpha, float beta, std::mt19937& rng) {
  const int m = s.m, n = s.n, k = s.k;
  // Stored shapes: NT a[m,k] b[n,k]; NN a[m,k] b[k,n]; TN a[k,m] b[k,n].
  const int a_rows = op == Op::kTN ? k : m, a_cols = op == Op::kTN ? m : k;
  const int b_rows = op == Op::kNT ? n : k, b_cols = op == Op::kNT ? k : n;
  const int lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
  // Keep at least one element so pointers are valid even for empty shapes.
  std::vector<float> a = Random(std::max<size_t>(1, static_cast<size_t>(a_rows) * lda), rng);
  std::vector<float> b = Random(std::max<size_t>(1, static_cast<size_t>(b_rows) * ldb), rng);
  const std::vector<float> c0 = Random(std::max<size_t>(1, static_cast<size_t>(m) * ldc), rng);
  std::vector<float> c = c0;

  Call(op, m, n, k, alpha, a.data(), std::max(1, lda), b.data(), std::max(1, ldb), beta,
       c.data(), std::max(1, ldc));

  const std::string where = std::string(Name(op)) + " m=" + std::to_string(m) +
                            " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                            " pad=" + std::to_string(pad);
  int failures = 0;
  for (int i = 0; i < m && failures < 5; ++i) {
    for (int j = 0; j < ldc && failures < 5; ++j) {
      const size_t idx = static_cast<size_t>(i) * ldc + j;
      if (j >= n) {  // padding column: must be untouched
        if (c[idx] != c0[idx]) {
          ++failures;
          ADD_FAILURE() << where << ": padding c[" << i << "," << j << "] changed";
        }
        continue;
      }
      double dot = 0.0, mag = 0.0;
      for (int p = 0; p < k; ++p) {
        const double prod = static_cast<double>(A(op, a, lda, i, p)) * B(op, b, ldb, p, j);
        dot += prod;
        mag += std::fabs(prod);
      }
      const double want = alpha * dot + beta * static_cast<double>(c0[idx]);
      // float32 rounding error is bounded relative to the sum of |terms|, not to the result.
      const double tol = 1e-5 * (1.0 + std::fabs(alpha) * mag + std::fabs(beta * c0[idx]));
      if (!(std::fabs(c[idx] - want) <= tol)) {
        ++failures;
        ADD_FAILURE() << where << ": c[" << i << "," << j << "] = " << c[idx] << ", want "
                      << want << " (tol " << tol << ")";
      }
    }
  }
}

const Shape kShapes[] = {
    {1, 1, 1},   {1, 7, 3},     {3, 1, 7},    {7, 3, 1},    {17, 33, 65},
    {33, 17, 7}, {65, 130, 33}, {130, 65, 17}, {2, 257, 130}, {1, 512, 64},
};

class GemmTest : public ::testing::TestWithParam<Op> {};

TEST_P(GemmTest, MatchesReferenceContiguous) {
  std::mt19937 rng(1234);
  for (const Shape& s : kShapes) CheckGemm(GetParam(), s, /*pad=*/0, 1.0f, 0.0f, rng);
}

TEST_P(GemmTest, MatchesReferenceWithPaddedStridesAlphaBeta) {
  std::mt19937 rng(99);
  for (const Shape& s : kShapes) {
    CheckGemm(GetParam(), s, /*pad=*/3, 0.75f, -1.5f, rng);
    CheckGemm(GetParam(), s, /*pad=*/16, -2.0f, 0.5f, rng);
  }
}

TEST_P(GemmTest, BetaOneAccumulates) {
  std::mt19937 rng(7);
  for (const Shape& s : kShapes) CheckGemm(GetParam(), s, /*pad=*/5, 1.0f, 1.0f, rng);
}

TEST_P(GemmTest, ZeroKScalesByBeta) {
  std::mt19937 rng(11);
  CheckGemm(GetParam(), {3, 7, 0}, /*pad=*/2, 1.25f, 0.5f, rng);
  CheckGemm(GetParam(), {17, 1, 0}, /*pad=*/0, 1.0f, 0.0f, rng);
}

TEST_P(GemmTest, EmptyMOrNIsNoOp) {
  // With m == 0 or n == 0 nothing may be written, whatever the other arguments.
  std::mt19937 rng(5);
  std::vector<float> a = Random(64, rng), b = Random(64, rng);
  const std::vector<float> c0 = Random(64, rng);
  for (const Shape& s : {Shape{0, 4, 3}, Shape{4, 0, 3}, Shape{0, 0, 5}}) {
    std::vector<float> c = c0;
    Call(GetParam(), s.m, s.n, s.k, 2.0f, a.data(), 8, b.data(), 8, 3.0f, c.data(), 8);
    EXPECT_EQ(c, c0) << Name(GetParam()) << " m=" << s.m << " n=" << s.n;
  }
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, GemmTest, ::testing::Values(Op::kNT, Op::kNN, Op::kTN),
                         [](const ::testing::TestParamInfo<Op>& info) {
                           return std::string(Name(info.param));
                         });

TEST(GemmLayouts, TransposesAreDistinguished) {
  // A tiny hand-computed case so a swapped transpose flag cannot hide behind symmetric data.
  const float a[] = {1, 2, 3, 4, 5, 6};  // as [2,3] row-major, or [3,2] for TN
  const float b[] = {1, 0, 2, 1, 0, 3};  // as [2,3] (NT: n=2,k=3) or [3,2] (NN/TN)
  float c[4] = {};
  GemmNT(2, 2, 3, 1.0f, a, 3, b, 3, 0.0f, c, 2);  // [[1,2,3],[4,5,6]] · [[1,0,2],[1,0,3]]^T
  EXPECT_EQ(std::vector<float>(c, c + 4), (std::vector<float>{7, 10, 16, 22}));
  GemmNN(2, 2, 3, 1.0f, a, 3, b, 2, 0.0f, c, 2);  // [[1,2,3],[4,5,6]] · [[1,0],[2,1],[0,3]]
  EXPECT_EQ(std::vector<float>(c, c + 4), (std::vector<float>{5, 11, 14, 23}));
  GemmTN(2, 2, 3, 1.0f, a, 2, b, 2, 0.0f, c, 2);  // [[1,3,5],[2,4,6]] · [[1,0],[2,1],[0,3]]
  EXPECT_EQ(std::vector<float>(c, c + 4), (std::vector<float>{7, 18, 10, 22}));
}

TEST(BlasThreads, SetAndGet) {
  SetBlasThreads(1);
  EXPECT_EQ(BlasThreads(), 1);
  SetBlasThreads(0);  // clamped to at least one thread
  EXPECT_EQ(BlasThreads(), 1);
}

// GemmPacked: c = a · b^T (+ bias) (+ c), b packed once. Checked against the double loop on
// every kernel the CPU has (AVX-512, AVX2, portable, on the same packed data), for sizes around the
// 14-row tiles, 32-column panels, 512-wide k blocks and 448-row passes.
struct PackedCase {
  int m, n, k;
};

class GemmPackedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetIsaForTesting(CpuIsa::kAvx512);
  }
  void TearDown() override {
    SetIsaForTesting(CpuIsa::kAvx512);
    SetComputeThreads(1);
  }
};

void CheckPacked(PackedCase s, bool with_bias, bool accumulate, int pad, std::mt19937& rng) {
  const int lda = s.k + pad, ldc = s.n + pad;
  const std::vector<float> a = Random(static_cast<size_t>(s.m) * lda, rng);
  const std::vector<float> b = Random(static_cast<size_t>(s.n) * (s.k + 1), rng);  // ldb = k + 1
  const std::vector<float> bias = Random(s.n, rng);
  const std::vector<float> c0 = Random(static_cast<size_t>(s.m) * ldc, rng);
  const PackedMatrix packed = PackedMatrix::Pack(s.n, s.k, b.data(), s.k + 1);
  ASSERT_FALSE(packed.empty());
  EXPECT_EQ(packed.n(), s.n);
  EXPECT_EQ(packed.k(), s.k);
  EXPECT_GE(packed.bytes(), static_cast<int64_t>(s.n) * s.k * 4);
  // Every path this CPU has, against the reference; the avx2 and avx512 paths also against
  // each other, bit for bit (the same FMA chain per element).
  std::vector<float> fma_result;
  for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx2, CpuIsa::kPortable}) {
    if (isa > DetectedIsa()) continue;
    SetIsaForTesting(isa);
    std::vector<float> c = c0;
    GemmPacked(s.m, a.data(), lda, packed, with_bias ? bias.data() : nullptr, accumulate, c.data(),
               ldc);
    SetIsaForTesting(CpuIsa::kAvx512);
    const std::string where = std::string(IsaName(isa)) + " m=" +
                              std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" +
                              std::to_string(s.k) + " bias=" + std::to_string(with_bias) +
                              " accumulate=" + std::to_string(accumulate);
    if (isa != CpuIsa::kPortable) {
      if (fma_result.empty()) {
        fma_result = c;
      } else {
        EXPECT_TRUE(c == fma_result) << where << ": avx2 and avx512 results differ";
      }
    }
    int failures = 0;
    for (int i = 0; i < s.m && failures < 5; ++i) {
      for (int j = 0; j < ldc && failures < 5; ++j) {
        const size_t idx = static_cast<size_t>(i) * ldc + j;
        if (j >= s.n) {
          if (c[idx] != c0[idx]) ++failures, ADD_FAILURE() << where << ": padding changed";
          continue;
        }
        double want = (with_bias ? bias[j] : 0.0) + (accumulate ? c0[idx] : 0.0), mag = std::fabs(want);
        for (int p = 0; p < s.k; ++p) {
          const double prod = static_cast<double>(a[static_cast<size_t>(i) * lda + p]) *
                              b[static_cast<size_t>(j) * (s.k + 1) + p];
          want += prod;
          mag += std::fabs(prod);
        }
        if (!(std::fabs(c[idx] - want) <= 1e-5 * (1.0 + mag))) {
          ++failures;
          ADD_FAILURE() << where << ": c[" << i << "," << j << "] = " << c[idx] << ", want " << want;
        }
      }
    }
  }
}

TEST_F(GemmPackedTest, MatchesReference) {
  std::mt19937 rng(2024);
  const PackedCase cases[] = {{1, 1, 1},     {2, 17, 5},    {13, 31, 16},  {14, 32, 17},
                              {15, 33, 31},  {27, 64, 64},  {128, 100, 3}, {29, 65, 511},
                              {3, 40, 513},  {16, 7, 1030}, {450, 33, 20}, {129, 96, 530}};
  for (const PackedCase& s : cases) {
    for (bool bias : {false, true}) {
      for (bool accumulate : {false, true}) CheckPacked(s, bias, accumulate, bias ? 3 : 0, rng);
    }
  }
}

// The whole batch on 1 and on 2 threads, and each of `rows` alone, give bit-identical rows
// under the active ISA level; returns the 1-thread result. `what` names the kernel in failures.
std::vector<float> ExpectRowsIndependent(int m, int n, int k, const std::vector<float>& a, const PackedMatrix& packed,
                                         const std::vector<float>& bias, std::initializer_list<int> rows,
                                         const std::string& what) {
  std::vector<float> one_thread(static_cast<size_t>(m) * n), two_threads(one_thread.size());
  SetComputeThreads(1);
  GemmPacked(m, a.data(), k, packed, bias.data(), false, one_thread.data(), n);
  SetComputeThreads(2);
  GemmPacked(m, a.data(), k, packed, bias.data(), false, two_threads.data(), n);
  EXPECT_EQ(one_thread, two_threads) << what;
  for (int i : rows) {
    std::vector<float> row(n);
    GemmPacked(1, a.data() + static_cast<size_t>(i) * k, k, packed, bias.data(), false, row.data(), n);
    EXPECT_TRUE(std::equal(row.begin(), row.end(), one_thread.begin() + static_cast<size_t>(i) * n))
        << what << " row " << i;
  }
  return one_thread;
}

TEST_F(GemmPackedTest, RowsDoNotDependOnBatchOrThreads) {
  // Every element is the same sequence of FMAs whatever the tile height (m), the row pass or
  // the number of threads: a row alone, the whole batch on 1 or 2 threads are bit-identical,
  // on each path this CPU has (the portable one with a multiply and an add per step).
  std::mt19937 rng(77);
  const int m = 460, n = 200, k = 600;
  const std::vector<float> a = Random(static_cast<size_t>(m) * k, rng);
  const std::vector<float> b = Random(static_cast<size_t>(n) * k, rng);
  const std::vector<float> bias = Random(n, rng);
  const PackedMatrix packed = PackedMatrix::Pack(n, k, b.data(), k);
  for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx2, CpuIsa::kPortable}) {
    if (isa > DetectedIsa()) continue;
    SetIsaForTesting(isa);
    ExpectRowsIndependent(m, n, k, a, packed, bias, {0, 5, 6, 13, 14, 200, 459}, IsaName(isa));
  }
  SetIsaForTesting(CpuIsa::kAvx512);
}

// relu = true gives bit for bit GemmPacked followed by BiasActivation's ReLU (x > 0 ? x : 0, so
// NaN and -0 become +0), on every path, float32 and int8 weights, over several k blocks (a
// partial sum below zero in an early block is not clamped) and with accumulate.
TEST_F(GemmPackedTest, FusedReluEqualsTheSeparatePass) {
  std::mt19937 rng(91);
  const int m = 33, n = 70, k = 1100;  // three k blocks, a partial last panel
  std::vector<float> a = Random(static_cast<size_t>(m) * k, rng);
  const std::vector<float> b = Random(static_cast<size_t>(n) * k, rng);
  const std::vector<float> bias = Random(n, rng);
  const std::vector<float> c0 = Random(static_cast<size_t>(m) * n, rng);
  // Row 3 all zero: its outputs are the bias; column 5's bias -0.0f makes -0 outputs there.
  std::fill(a.begin() + 3 * k, a.begin() + 4 * k, 0.0f);
  std::vector<float> signed_zero_bias = bias;
  signed_zero_bias[5] = -0.0f;
  // Row 7 has a NaN: every output of that row is NaN before the ReLU.
  a[static_cast<size_t>(7) * k + 11] = std::nanf("");
  for (bool int8 : {false, true}) {
    const PackedMatrix packed = int8 ? PackedMatrix::PackInt8(n, k, b.data(), k) : PackedMatrix::Pack(n, k, b.data(), k);
    for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx2, CpuIsa::kPortable}) {
      if (isa > DetectedIsa()) continue;
      SetIsaForTesting(isa);
      for (bool accumulate : {false, true}) {
        std::vector<float> want = c0, got = c0;
        GemmPacked(m, a.data(), k, packed, signed_zero_bias.data(), accumulate, want.data(), n);
        BiasActivation(want.data(), nullptr, m, n, Activation::kRelu);
        GemmPacked(m, a.data(), k, packed, signed_zero_bias.data(), accumulate, got.data(), n, /*relu=*/true);
        const std::string where = std::string(IsaName(isa)) + (int8 ? " int8" : " float32") +
                                  " accumulate=" + std::to_string(accumulate);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size())) << where;
        int negative = 0, nan = 0;
        for (float x : got) negative += std::signbit(x), nan += std::isnan(x);
        EXPECT_EQ(negative, 0) << where;
        EXPECT_EQ(nan, 0) << where;
        if (!accumulate) EXPECT_EQ(got[static_cast<size_t>(3) * n + 5], 0.0f) << where;
      }
    }
    SetIsaForTesting(CpuIsa::kAvx512);
  }
}

// Mostly-zero activations, as a ReLU leaves them: rows of `density` nonzero values (negative
// ones, which the sign test below needs), some rows all zero, and columns [zero_from, zero_to)
// zero in every row.
std::vector<float> ReluLike(int m, int k, double density, int zero_from, int zero_to, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-2.0f, -0.01f);
  std::bernoulli_distribution on(density);
  std::vector<float> a(static_cast<size_t>(m) * k, 0.0f);
  for (int i = 0; i < m; ++i) {
    if (i % 7 == 3) continue;  // all zero
    for (int p = 0; p < k; ++p) {
      if ((p < zero_from || p >= zero_to) && on(rng)) a[static_cast<size_t>(i) * k + p] = value(rng);
    }
  }
  return a;
}

// Row i not zero only in the (i % 5)-th fifth of the k steps (density 0.5 there): the rows of
// a tile are zero at different steps, so its groups of rows list different steps, and no step
// is zero in every row of a tall tile.
std::vector<float> RowBands(int m, int k, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(0.01f, 2.0f);
  std::bernoulli_distribution on(0.5);
  std::vector<float> a(static_cast<size_t>(m) * k, 0.0f);
  for (int i = 0; i < m; ++i) {
    for (int p = (i % 5) * k / 5; p < (i % 5 + 1) * k / 5; ++p) {
      if (on(rng)) a[static_cast<size_t>(i) * k + p] = value(rng);
    }
  }
  return a;
}

// The FMA chain each kernel runs per element (init, then fma(a[i,p], b[j,p], acc) over every p
// in order): the dense result bit for bit, zero steps included.
std::vector<float> FmaChain(int m, int n, int k, const std::vector<float>& a, const std::vector<float>& b,
                            const float* bias) {
  std::vector<float> c(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      float acc = bias != nullptr ? bias[j] : 0.0f;
      for (int p = 0; p < k; ++p) acc = std::fma(a[static_cast<size_t>(i) * k + p], b[static_cast<size_t>(j) * k + p], acc);
      c[static_cast<size_t>(i) * n + j] = acc;
    }
  }
  return c;
}

// Zero activations: on the AVX-512 and AVX2 paths, the k steps at which every row of a tile is
// zero are skipped, and the values are those of the whole FMA chain, zero steps included (==,
// element by element), for batches around the tile heights, over three k blocks, on 1 and 2
// threads, with row splits; each row alone gives the batch's row.
TEST_F(GemmPackedTest, ZeroActivationStepsAreSkippedWithoutChangingValues) {
  if (DetectedIsa() < CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2: no kernel here skips zero steps";
  std::mt19937 rng(5);
  const int n = 70, k = 1100;
  const std::vector<float> b = Random(static_cast<size_t>(n) * k, rng);
  const std::vector<float> bias = Random(n, rng);
  const PackedMatrix packed = PackedMatrix::Pack(n, k, b.data(), k);
  ASSERT_TRUE(packed.finite());
  // Activation patterns for m rows: zero at random steps with three densities (and in every
  // row from step 500 to 699); zero at random steps only, most steps listed; zero outside each
  // row's own band of steps.
  const std::vector<std::pair<std::string, std::function<std::vector<float>(int)>>> patterns = {
      {"density 0.02", [&](int m) { return ReluLike(m, k, 0.02, 500, 700, rng); }},
      {"density 0.2", [&](int m) { return ReluLike(m, k, 0.2, 500, 700, rng); }},
      {"density 0.9", [&](int m) { return ReluLike(m, k, 0.9, 500, 700, rng); }},
      {"density 0.95, no zero band", [&](int m) { return ReluLike(m, k, 0.95, 0, 0, rng); }},
      {"row bands", [&](int m) { return RowBands(m, k, rng); }}};
  for (const int m : {1, 6, 13, 14, 29, 200, 460}) {
    for (const auto& [pattern, make] : patterns) {
      const std::vector<float> a = make(m);
      const std::vector<float> want = FmaChain(m, n, k, a, b, bias.data());
      for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx2}) {
        if (isa > DetectedIsa()) continue;
        SetIsaForTesting(isa);
        for (int threads : {1, 2}) {
          SetComputeThreads(threads);
          std::vector<float> c(want.size());
          GemmPacked(m, a.data(), k, packed, bias.data(), false, c.data(), n);
          EXPECT_TRUE(c == want) << IsaName(isa) << " m=" << m << " " << pattern << " threads=" << threads;
        }
        SetComputeThreads(1);
        if (m > 1) {
          ExpectRowsIndependent(m, n, k, a, packed, bias, {0, 3, m - 1},
                                std::string(IsaName(isa)) + " " + pattern);
        }
      }
    }
  }
  SetIsaForTesting(CpuIsa::kAvx512);
}

// What a skip can change, shown where it does: a zero's sign. Column 0's weights are all +0
// and its bias -0; every row is negative at every 10th step and zero elsewhere, so the
// products in that column are -0 at those steps and +0 at the others. The whole chain turns
// -0 into +0 at the first zero step; a kernel that skipped the zero steps keeps -0. So the
// sign says which ran: the skipping kernels on the AVX-512 and AVX2 paths, the whole chain on
// the portable path, and the whole chain too where a weight is not finite (a zero step's
// 0 * inf must give NaN).
TEST_F(GemmPackedTest, ZeroStepsSkippedOnlyWhereTheyChangeNoValue) {
  std::mt19937 rng(6);
  const int m = 40, n = 40, k = 600;
  std::vector<float> b = Random(static_cast<size_t>(n) * k, rng);
  for (int p = 0; p < k; ++p) b[p] = 0.0f;  // column 0
  std::vector<float> bias = Random(n, rng);
  bias[0] = -0.0f;
  std::vector<float> a(static_cast<size_t>(m) * k, 0.0f);
  for (int i = 0; i < m; ++i) {
    for (int p = 0; p < k; p += 10) a[static_cast<size_t>(i) * k + p] = -0.5f - 0.01f * static_cast<float>(i % 9);
  }
  // check(w, isa, c): the result c of a times w on each path this CPU has.
  auto on_each_path = [&](const PackedMatrix& w, const std::function<void(CpuIsa, const std::vector<float>&)>& check) {
    for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx2, CpuIsa::kPortable}) {
      if (isa > DetectedIsa()) continue;
      SetIsaForTesting(isa);
      std::vector<float> c(static_cast<size_t>(m) * n);
      GemmPacked(m, a.data(), k, w, bias.data(), false, c.data(), n);
      check(isa, c);
    }
    SetIsaForTesting(CpuIsa::kAvx512);
  };
  const PackedMatrix packed = PackedMatrix::Pack(n, k, b.data(), k);
  ASSERT_TRUE(packed.finite());
  on_each_path(packed, [&](CpuIsa isa, const std::vector<float>& c) {
    for (int i = 0; i < m; ++i) {
      EXPECT_EQ(c[static_cast<size_t>(i) * n], 0.0f);
      EXPECT_EQ(std::signbit(c[static_cast<size_t>(i) * n]), isa != CpuIsa::kPortable) << IsaName(isa) << " row " << i;
    }
  });
  // An infinite weight at a step that is zero in every row: the products there are NaN, so
  // nothing is skipped (column 0 comes out +0 on every path) and that column is NaN.
  b[static_cast<size_t>(5) * k + 11] = INFINITY;
  const PackedMatrix with_inf = PackedMatrix::Pack(n, k, b.data(), k);
  EXPECT_FALSE(with_inf.finite());
  on_each_path(with_inf, [&](CpuIsa isa, const std::vector<float>& c) {
    for (int i = 0; i < m; ++i) {
      EXPECT_FALSE(std::signbit(c[static_cast<size_t>(i) * n])) << IsaName(isa) << " row " << i;
      EXPECT_TRUE(std::isnan(c[static_cast<size_t>(i) * n + 5])) << IsaName(isa) << " row " << i;
    }
  });
}

TEST_F(GemmPackedTest, EmptyShapes) {
  std::mt19937 rng(3);
  const std::vector<float> b = Random(64, rng);
  EXPECT_TRUE(PackedMatrix::Pack(0, 8, b.data(), 8).empty());
  EXPECT_TRUE(PackedMatrix::Pack(8, 0, b.data(), 8).empty());
  EXPECT_FALSE(PreferPacked(4, PackedMatrix()));
  const PackedMatrix packed = PackedMatrix::Pack(8, 8, b.data(), 8);
  std::vector<float> c(64, 1.0f);
  GemmPacked(0, b.data(), 8, packed, nullptr, false, c.data(), 8);  // m == 0: nothing written
  EXPECT_EQ(c, std::vector<float>(64, 1.0f));
}

// GemmPacked with int8 weights (PackedMatrix::PackInt8). The reference quantizes exactly as
// documented in gemm.h (per output column for b and per row for a to +-63, round to
// nearest even), sums the integer products in 64 bits and applies fma(sum, s_a * s_w, init): every
// kernel the CPU has (avx512-amx, avx512-vnni, avx2, portable) must give that result bit for
// bit, and it must be close to the float product.
// Every int8 kernel this CPU runs, as the settings that select it: the level's cap and whether
// AMX may be used (AMX first where the CPU has it; then VNNI, or AVX2 where AVX-512 lacks it).
struct Int8Kernel {
  CpuIsa isa;
  bool amx;
};

std::vector<Int8Kernel> Int8Kernels() {
  std::vector<Int8Kernel> kernels;
  if (HasAmxInt8()) kernels.push_back({CpuIsa::kAvx512, true});
  for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx2, CpuIsa::kPortable}) {
    if (isa <= DetectedIsa()) kernels.push_back({isa, false});
  }
  return kernels;
}

void SelectInt8Kernel(Int8Kernel kernel) {
  SetIsaForTesting(kernel.isa);
  SetAmxForTesting(kernel.amx);
}

void RestoreInt8Kernel() { SelectInt8Kernel({CpuIsa::kAvx512, true}); }

struct Int8Quantized {
  std::vector<int32_t> q;
  std::vector<float> scale;
};

// levels: 63 (7 bits) for activations and weights alike.
Int8Quantized QuantizeRowsForTest(const std::vector<float>& x, int rows, int k, int ld, float levels) {
  Int8Quantized out{std::vector<int32_t>(static_cast<size_t>(rows) * k), std::vector<float>(rows)};
  for (int r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int p = 0; p < k; ++p) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r) * ld + p]));
    if (amax == 0.0f) continue;
    out.scale[r] = amax / levels;
    const float inv = levels / amax;
    for (int p = 0; p < k; ++p) {
      const float v = std::nearbyint(x[static_cast<size_t>(r) * ld + p] * inv);
      out.q[static_cast<size_t>(r) * k + p] = static_cast<int32_t>(std::min(levels, std::max(-levels, v)));
    }
  }
  return out;
}

void CheckPackedInt8(PackedCase s, bool with_bias, bool accumulate, int pad, std::mt19937& rng) {
  const int lda = s.k + pad, ldc = s.n + pad;
  std::vector<float> a = Random(static_cast<size_t>(s.m) * lda, rng);
  std::vector<float> b = Random(static_cast<size_t>(s.n) * (s.k + 1), rng);  // ldb = k + 1
  if (s.m > 2) std::fill(a.begin() + lda, a.begin() + 2 * lda, 0.0f);          // a zero row
  if (s.n > 2) std::fill(b.begin() + (s.k + 1), b.begin() + 2 * (s.k + 1), 0.0f);  // a zero column
  const std::vector<float> bias = Random(s.n, rng);
  const std::vector<float> c0 = Random(static_cast<size_t>(s.m) * ldc, rng);
  const PackedMatrix packed = PackedMatrix::PackInt8(s.n, s.k, b.data(), s.k + 1);
  ASSERT_FALSE(packed.empty());
  ASSERT_TRUE(packed.is_int8());
  EXPECT_EQ(packed.n(), s.n);
  EXPECT_EQ(packed.k(), s.k);
  EXPECT_GE(packed.bytes(), static_cast<int64_t>(s.n) * s.k);
  EXPECT_LT(packed.bytes(), static_cast<int64_t>(s.n + 32) * (s.k + 4) + 8 * (s.n + 32));
  const Int8Quantized qa = QuantizeRowsForTest(a, s.m, s.k, lda, 63.0f);
  const Int8Quantized qb = QuantizeRowsForTest(b, s.n, s.k, s.k + 1, 63.0f);
  std::vector<float> want = c0;
  for (int i = 0; i < s.m; ++i) {
    for (int j = 0; j < s.n; ++j) {
      int64_t sum = 0;
      for (int p = 0; p < s.k; ++p) {
        sum += static_cast<int64_t>(qa.q[static_cast<size_t>(i) * s.k + p]) * qb.q[static_cast<size_t>(j) * s.k + p];
      }
      const size_t idx = static_cast<size_t>(i) * ldc + j;
      const float init = (accumulate ? c0[idx] : 0.0f) + (with_bias ? bias[j] : 0.0f);
      want[idx] = std::fma(static_cast<float>(sum), qa.scale[i] * qb.scale[j], init);
    }
  }
  for (Int8Kernel selected : Int8Kernels()) {
    SelectInt8Kernel(selected);
    const std::string kernel = Int8KernelName();
    std::vector<float> c = c0;
    GemmPacked(s.m, a.data(), lda, packed, with_bias ? bias.data() : nullptr, accumulate, c.data(), ldc);
    RestoreInt8Kernel();
    const std::string where = kernel + " m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                              " k=" + std::to_string(s.k) + " bias=" + std::to_string(with_bias) +
                              " accumulate=" + std::to_string(accumulate);
    int failures = 0;
    for (int i = 0; i < s.m && failures < 5; ++i) {
      for (int j = 0; j < ldc && failures < 5; ++j) {
        const size_t idx = static_cast<size_t>(i) * ldc + j;
        if (c[idx] != want[idx]) {
          ++failures;
          ADD_FAILURE() << where << ": c[" << i << "," << j << "] = " << c[idx] << ", want exactly " << want[idx];
        }
        if (j >= s.n) continue;
        // Against the float product: each quantized operand is off by at most half a step.
        double exact = 0.0, bound = 0.0;
        for (int p = 0; p < s.k; ++p) {
          const double x = a[static_cast<size_t>(i) * lda + p], y = b[static_cast<size_t>(j) * (s.k + 1) + p];
          exact += x * y;
          bound += 0.5 * qa.scale[i] * std::fabs(y) + 0.5 * qb.scale[j] * std::fabs(x) +
                   0.25 * qa.scale[i] * qb.scale[j];
        }
        const double base = (accumulate ? c0[idx] : 0.0) + (with_bias ? bias[j] : 0.0);
        if (!(std::fabs(c[idx] - base - exact) <= bound + 1e-5 * (1.0 + std::fabs(exact)))) {
          ++failures;
          ADD_FAILURE() << where << ": c[" << i << "," << j << "] = " << c[idx] << ", float product "
                        << base + exact << ", bound " << bound;
        }
      }
    }
  }
}

TEST(GemmPackedInt8Test, MatchesReferenceOnEveryKernel) {
  std::mt19937 rng(4242);
  // (AMX: one and two tile rows, 32-row tiles with a shorter last one, k below, at and past
  // a 64-byte chunk.)
  const PackedCase cases[] = {{1, 1, 1},    {2, 17, 5},    {13, 31, 16},  {12, 32, 17},
                              {5, 33, 3},   {27, 64, 64},  {128, 100, 7}, {29, 65, 511},
                              {3, 40, 513}, {16, 7, 1030}, {130, 96, 258}, {17, 33, 64},
                              {40, 50, 200}, {64, 32, 65},  {97, 70, 128}};
  for (const PackedCase& s : cases) {
    for (bool bias : {false, true}) {
      for (bool accumulate : {false, true}) CheckPackedInt8(s, bias, accumulate, bias ? 3 : 0, rng);
    }
  }
  SetComputeThreads(1);
}

TEST(GemmPackedInt8Test, RowsDoNotDependOnBatchOrThreads) {
  std::mt19937 rng(78);
  // m >= 96 rows per thread: 2 threads split the rows, 1 thread the panels.
  const int m = 250, n = 200, k = 300;
  const std::vector<float> a = Random(static_cast<size_t>(m) * k, rng);
  const std::vector<float> b = Random(static_cast<size_t>(n) * k, rng);
  const std::vector<float> bias = Random(n, rng);
  const PackedMatrix packed = PackedMatrix::PackInt8(n, k, b.data(), k);
  std::vector<float> first;
  for (Int8Kernel selected : Int8Kernels()) {
    SelectInt8Kernel(selected);
    const std::vector<float> one_thread =
        ExpectRowsIndependent(m, n, k, a, packed, bias, {0, 3, 4, 11, 12, 100, 149, 249}, Int8KernelName());
    if (first.empty()) first = one_thread;
    EXPECT_EQ(one_thread, first) << Int8KernelName() << " differs from the first kernel";
  }
  RestoreInt8Kernel();
  SetComputeThreads(1);
}

// The extreme products: activations and weights at +-max quantize to +-63, so every byte
// product is +-63 * 63 and the AVX2 kernel's 16-bit sums of four of them (two groups' pairs)
// reach +-4 * 127 * 63 before the activations' offset is taken off. Every kernel must still
// give the exact integer sums: c[i, j] = k * (sign of a row i) * (sign of b column j) * the
// scales' product, compared on every kernel with that closed form.
TEST(GemmPackedInt8Test, ExtremeValuesAreExact) {
  const int m = 13, n = 40, k = 67;  // 17 groups: pairs and a last group alone
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(n) * k);
  for (int i = 0; i < m; ++i) {
    for (int p = 0; p < k; ++p) a[static_cast<size_t>(i) * k + p] = (i % 3 == 0) ? 2.0f : (i % 3 == 1) ? -2.0f : (p % 2 ? 2.0f : -2.0f);
  }
  for (int j = 0; j < n; ++j) {
    for (int p = 0; p < k; ++p) b[static_cast<size_t>(j) * k + p] = (j % 2 == 0) ? 0.5f : -0.5f;
  }
  const PackedMatrix packed = PackedMatrix::PackInt8(n, k, b.data(), k);
  for (Int8Kernel selected : Int8Kernels()) {
    SelectInt8Kernel(selected);
    std::vector<float> c(static_cast<size_t>(m) * n, -1.0f);
    GemmPacked(m, a.data(), k, packed, nullptr, false, c.data(), n);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        int64_t sum = 0;
        for (int p = 0; p < k; ++p) {
          const float x = a[static_cast<size_t>(i) * k + p], y = b[static_cast<size_t>(j) * k + p];
          sum += (x > 0 ? 63 : -63) * (y > 0 ? 63 : -63);
        }
        const float want = std::fma(static_cast<float>(sum), (2.0f / 63.0f) * (0.5f / 63.0f), 0.0f);
        ASSERT_EQ(c[static_cast<size_t>(i) * n + j], want) << Int8KernelName() << " c[" << i << "," << j << "]";
      }
    }
  }
  RestoreInt8Kernel();
}

// The kernel's name follows what runs: AMX where the CPU and the operating system allow it
// (and not turned off), VNNI when AMX is off, never AMX below the avx512 level.
TEST(GemmPackedInt8Test, KernelNameFollowsAmx) {
  EXPECT_EQ(UseAmxInt8(), HasAmxInt8() && std::getenv("TNMT_NO_AMX") == nullptr && UseAvx512());
  if (UseAmxInt8()) {
    EXPECT_STREQ(Int8KernelName(), "avx512-amx");
  }
  SetAmxForTesting(false);
  EXPECT_FALSE(UseAmxInt8());
  EXPECT_STRNE(Int8KernelName(), "avx512-amx");
  SetAmxForTesting(true);
  SetIsaForTesting(CpuIsa::kAvx2);
  EXPECT_FALSE(UseAmxInt8());
  EXPECT_STREQ(Int8KernelName(), DetectedIsa() >= CpuIsa::kAvx2 ? "avx2" : "portable");
  RestoreInt8Kernel();
}

TEST(GemmPackedInt8Test, EmptyShapesAndPreferPacked) {
  std::vector<float> b(64, 0.5f);
  EXPECT_TRUE(PackedMatrix::PackInt8(0, 8, b.data(), 8).empty());
  EXPECT_TRUE(PackedMatrix::PackInt8(8, 0, b.data(), 8).empty());
  // int8 matrices exist and are used on every CPU, the portable level included.
  SetIsaForTesting(CpuIsa::kPortable);
  const PackedMatrix packed = PackedMatrix::PackInt8(8, 8, b.data(), 8);
  EXPECT_FALSE(packed.empty());
  EXPECT_TRUE(PreferPacked(1, packed));
  EXPECT_STREQ(Int8KernelName(), "portable");
  SetIsaForTesting(CpuIsa::kAvx512);
}

TEST(GemmPackedDispatch, PackingOnEveryLevel) {
  // float32 matrices are packed and used at every level, the portable one included: no
  // inference GEMM falls back to OpenBLAS, whose rounding depends on the batch.
  std::vector<float> b(64, 1.0f);
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    SetIsaForTesting(isa);
    const PackedMatrix packed = PackedMatrix::Pack(8, 8, b.data(), 8);
    EXPECT_FALSE(packed.empty()) << IsaName(isa);
    EXPECT_TRUE(PreferPacked(1, packed)) << IsaName(isa);
  }
  SetIsaForTesting(CpuIsa::kAvx512);
}

TEST(GemmPackedDispatch, IsaNames) {
  EXPECT_STREQ(IsaName(CpuIsa::kAvx512), "avx512");
  EXPECT_STREQ(IsaName(CpuIsa::kAvx2), "avx2");
  EXPECT_STREQ(IsaName(CpuIsa::kPortable), "portable");
  SetIsaForTesting(CpuIsa::kAvx2);
  EXPECT_LE(ActiveIsa(), CpuIsa::kAvx2);
  SetIsaForTesting(CpuIsa::kAvx512);
  EXPECT_EQ(ActiveIsa() <= DetectedIsa(), true);
}

}  // namespace
}  // namespace tnmt::kernels::cpu
