// The embedding kernels both devices have (kernels/cpu/embedding.h, kernels/cuda/embedding.h),
// each test body run on every device (kernels/testing/devices.h) against a naive host loop:
// EmbedTokens from a float32 table with and without positions, SinusoidalPositions (the
// paper's interleaved sin/cos), and EmbeddingBackward (tokens sharing an id and a position
// accumulated, twice the same bits).
//
// On one device only: SinusoidalPositionsHalves is a CPU kernel (kernels/cpu); EmbedTokens from
// float16 and bfloat16 tables is a CUDA kernel (kernels/cuda/embedding_test.cc).
//
// Tolerances: EmbedTokens is one product and one sum per element, rounded once or twice (the
// CPU's AVX2 and AVX-512 clones may fuse them): within 2^-22 (|e * scale| + |p|) of float64,
// twice the bound of two roundings. The position table is computed in
// double and rounded once: 1e-6 absolute against float64 (half an ulp of 1 is 6e-8; the sin
// and cos of large angles lose a few more bits in double's argument reduction). The gradient
// adds each token's row in token order on both devices (the CPU's vector paths may fuse the
// multiply-add): 2-norm relative 1e-6 against float64, and per element within the worst case
// of a float32 sum of n terms, n 2^-23 times the sum of their magnitudes (an id may take a
// thousand rows).
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/embedding.h"
#include "kernels/testing/devices.h"
#if TNMT_TEST_CUDA
#include "kernels/cuda/embedding.h"
#endif

namespace tnmt::kernels {
namespace {

using testing::ExpectAllNear;
using testing::ExpectSameBits;
using testing::RelativeError;

class EmbeddingTest : public testing::DeviceTest {
 protected:
  std::vector<int32_t> RandomInts(size_t n, int lo, int hi) {
    std::uniform_int_distribution<int> dist(lo, hi);
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = dist(rng_);
    return v;
  }

  absl::Status EmbedTokens(float* out, const int32_t* ids, const int32_t* positions, int64_t count,
                           const float* table, const float* pos, int d, float scale) {
    if (cpu()) return cpu::EmbedTokens(out, ids, positions, count, table, pos, d, scale), absl::OkStatus();
    return TNMT_IF_CUDA(
        cuda::EmbedTokens(ctx(), out, ids, positions, count, table, DType::kFloat32, pos, d, scale));
  }
  absl::Status SinusoidalPositions(float* table, int rows, int d) {
    if (cpu()) return cpu::SinusoidalPositions(table, rows, d), absl::OkStatus();
    return TNMT_IF_CUDA(cuda::SinusoidalPositions(ctx(), table, rows, d));
  }
  absl::Status EmbeddingBackward(float* dtable, float* dpos, const float* dx, const int32_t* ids,
                                 const int32_t* positions, int64_t count, int d, float scale) {
    if (cpu()) {
      cpu::EmbeddingBackward(dtable, dpos, dx, ids, positions, count, d, scale);
      return absl::OkStatus();
    }
    return TNMT_IF_CUDA(cuda::EmbeddingBackward(ctx(), dtable, dpos, dx, ids, positions, count, d, scale));
  }

};

TEST_P(EmbeddingTest, EmbedTokensWithAndWithoutPositions) {
  const int vocab = 50, max_pos = 40;
  for (int d : {1, 3, 7, 33, 130, 512}) {
    for (int64_t count : {int64_t{1}, int64_t{17}, int64_t{77}}) {
      const std::vector<float> table = Random(static_cast<size_t>(vocab) * d);
      const std::vector<float> pos = Random(static_cast<size_t>(max_pos) * d);
      std::vector<int32_t> ids = RandomInts(count, 0, vocab - 1);
      std::vector<int32_t> positions = RandomInts(count, 0, max_pos - 1);
      ids[0] = vocab - 1;  // the table's last row
      positions[0] = max_pos - 1;
      for (float scale : {1.0f, std::sqrt(static_cast<float>(d)), 0.25f}) {
        SCOPED_TRACE(absl::StrCat("d ", d, " count ", count, " scale ", scale));
        const float* dtable = Upload(table);
        const int32_t* dids = Upload(ids);
        for (bool with_pos : {true, false}) {
          float* out = Alloc<float>(count * d);
          ASSERT_TRUE(EmbedTokens(out, dids, with_pos ? Upload(positions) : nullptr, count, dtable,
                                  with_pos ? Upload(pos) : nullptr, d, scale)
                          .ok());
          const std::vector<float> got = Download(out, count * d);
          int failures = 0;
          for (int64_t i = 0; i < count && failures < 5; ++i) {
            for (int j = 0; j < d && failures < 5; ++j) {
              const double e = static_cast<double>(table[ids[i] * d + j]) * scale;
              const double p = with_pos ? pos[positions[i] * d + j] : 0.0;
              if (!(std::fabs(got[i * d + j] - (e + p)) <= std::ldexp(std::fabs(e) + std::fabs(p), -22))) {
                ++failures;
                ADD_FAILURE() << (with_pos ? "with" : "without") << " positions: [" << i << ", " << j
                              << "] = " << got[i * d + j] << ", want " << e + p;
              }
            }
          }
        }
      }
    }
  }
}

TEST_P(EmbeddingTest, SinusoidalPositionsInterleaved) {
  for (auto [rows, d] :
       {std::pair<int, int>{65, 1}, {65, 2}, {65, 3}, {17, 7}, {65, 8}, {1030, 512}, {1024, 1024}}) {
    SCOPED_TRACE(absl::StrCat("rows ", rows, " d ", d));
    std::vector<double> want(static_cast<size_t>(rows) * d);
    for (int p = 0; p < rows; ++p) {
      for (int c = 0; c < d; ++c) {
        const int two_i = c - c % 2;  // column 2i holds sin, column 2i+1 cos
        const double angle = p / std::pow(10000.0, static_cast<double>(two_i) / d);
        want[static_cast<size_t>(p) * d + c] = c % 2 == 0 ? std::sin(angle) : std::cos(angle);
      }
    }
    float* table = Alloc<float>(want.size());
    ASSERT_TRUE(SinusoidalPositions(table, rows, d).ok());
    const std::vector<float> got = Download(table, want.size());
    ExpectAllNear(got, want, "table", 1e-6, 0.0);
    // Row 0: sin(0) = 0 and cos(0) = 1 exactly.
    for (int c = 0; c < d; ++c) EXPECT_EQ(got[c], c % 2 == 0 ? 0.0f : 1.0f) << "column " << c;
  }
}

TEST_P(EmbeddingTest, EmbeddingBackward) {
  struct Shape {
    int64_t count;
    int d, vocab, max_pos;
    bool with_pos;
  };
  for (const Shape s : {Shape{1, 5, 3, 2, true}, Shape{1000, 37, 50, 20, true},
                        Shape{3000, 512, 700, 100, true}, Shape{777, 16, 9, 30, false}}) {
    SCOPED_TRACE(absl::StrCat("count ", s.count, " d ", s.d, s.with_pos ? " positions" : ""));
    std::vector<int32_t> ids = RandomInts(s.count, 0, s.vocab - 1);
    for (int64_t i = 0; i < s.count; i += 3) ids[i] = 2;  // one frequent id
    std::vector<int32_t> positions(s.count);
    for (int64_t i = 0; i < s.count; ++i) positions[i] = static_cast<int32_t>(i % s.max_pos);
    const float scale = std::sqrt(static_cast<float>(s.d));
    const std::vector<float> dx = Random(static_cast<size_t>(s.count) * s.d);
    const std::vector<float> table0 = Random(static_cast<size_t>(s.vocab) * s.d);
    const std::vector<float> pos0 = Random(static_cast<size_t>(s.max_pos) * s.d);
    std::vector<double> table_want(table0.begin(), table0.end()), pos_want(pos0.begin(), pos0.end());
    // Per element: the sum of the terms' magnitudes, times the number of terms, times 2^-23.
    std::vector<double> table_tol(table0.size()), pos_tol(pos0.size());
    std::vector<int> table_terms(s.vocab, 1), pos_terms(s.max_pos, 1);
    for (size_t i = 0; i < table0.size(); ++i) table_tol[i] = std::fabs(table0[i]);
    for (size_t i = 0; i < pos0.size(); ++i) pos_tol[i] = std::fabs(pos0[i]);
    for (int64_t i = 0; i < s.count; ++i) {
      ++table_terms[ids[i]];
      ++pos_terms[positions[i]];
      for (int j = 0; j < s.d; ++j) {
        const double g = dx[i * s.d + j];
        table_want[static_cast<size_t>(ids[i]) * s.d + j] += static_cast<double>(scale) * g;
        table_tol[static_cast<size_t>(ids[i]) * s.d + j] += std::fabs(static_cast<double>(scale) * g);
        if (s.with_pos) {
          pos_want[static_cast<size_t>(positions[i]) * s.d + j] += g;
          pos_tol[static_cast<size_t>(positions[i]) * s.d + j] += std::fabs(g);
        }
      }
    }
    for (size_t i = 0; i < table_tol.size(); ++i) table_tol[i] *= std::ldexp(table_terms[i / s.d], -23);
    for (size_t i = 0; i < pos_tol.size(); ++i) pos_tol[i] *= std::ldexp(pos_terms[i / s.d], -23);
    auto expect_within = [](const std::vector<float>& got, const std::vector<double>& want,
                            const std::vector<double>& tol, const char* what) {
      int failures = 0;
      for (size_t i = 0; i < got.size() && failures < 5; ++i) {
        if (!(std::fabs(got[i] - want[i]) <= tol[i])) {
          ++failures;
          ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i] << " within "
                        << tol[i];
        }
      }
    };
    const float* ddx = Upload(dx);
    const int32_t* dids = Upload(ids);
    const int32_t* dpositions = Upload(positions);
    std::vector<float> table_runs[2], pos_runs[2];
    for (int run = 0; run < 2; ++run) {
      float* dtable = Upload(table0);
      float* dpos = Upload(pos0);
      ASSERT_TRUE(EmbeddingBackward(dtable, s.with_pos ? dpos : nullptr, ddx, dids,
                                    s.with_pos ? dpositions : nullptr, s.count, s.d, scale)
                      .ok());
      table_runs[run] = Download(dtable, table0.size());
      pos_runs[run] = Download(dpos, pos0.size());
    }
    ExpectSameBits(table_runs[1], table_runs[0], "dtable, second run");
    ExpectSameBits(pos_runs[1], pos_runs[0], "dpos, second run");
    EXPECT_LE(RelativeError(table_runs[0], table_want), 1e-6);
    expect_within(table_runs[0], table_want, table_tol, "dtable");
    if (s.with_pos) {
      EXPECT_LE(RelativeError(pos_runs[0], pos_want), 1e-6);
      expect_within(pos_runs[0], pos_want, pos_tol, "dpos");
    } else {
      ExpectSameBits(pos_runs[0], pos0, "dpos untouched without positions");
    }
  }
}

TNMT_INSTANTIATE_DEVICE_TEST(EmbeddingTest);

}  // namespace
}  // namespace tnmt::kernels
