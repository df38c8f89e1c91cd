// Checks the CPU embedding kernels against naive double-precision reference loops: token
// embeddings with and without positions, and the interleaved sinusoidal position table.
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tnmt::kernels::cpu {
namespace {

using testing::Random;

constexpr double kTol = 1e-5;  // absolute and relative tolerance for float32 results

// The shared comparison with this file's default tolerances.
void ExpectAllNear(const std::vector<float>& got, const std::vector<double>& want,
                   const std::string& what, double abs = kTol, double rel = kTol) {
  testing::ExpectAllNear(got, want, what, abs, rel);
}

// ---------------------------------------------------------------- EmbedTokens / positions

TEST(EmbedTokens, WithAndWithoutPositions) {
  std::mt19937 rng(8);
  const int vocab = 50, max_pos = 40;
  for (int d : {1, 3, 7, 33, 130}) {
    for (int64_t count : {1, 17}) {
      const std::vector<float> table = Random(static_cast<size_t>(vocab) * d, rng);
      const std::vector<float> pos = Random(static_cast<size_t>(max_pos) * d, rng);
      std::vector<int32_t> ids(count), positions(count);
      std::uniform_int_distribution<int32_t> id_dist(0, vocab - 1), pos_dist(0, max_pos - 1);
      for (auto& id : ids) id = id_dist(rng);
      for (auto& p : positions) p = pos_dist(rng);
      ids[0] = vocab - 1;  // last row of the table
      positions[0] = max_pos - 1;
      for (float scale : {1.0f, std::sqrt(static_cast<float>(d)), 0.25f}) {
        const std::string what = "EmbedTokens d=" + std::to_string(d) +
                                 " count=" + std::to_string(count) +
                                 " scale=" + std::to_string(scale);
        std::vector<double> want_pos(count * d), want_plain(count * d);
        for (int64_t i = 0; i < count; ++i) {
          for (int j = 0; j < d; ++j) {
            want_plain[i * d + j] = static_cast<double>(table[ids[i] * d + j]) * scale;
            want_pos[i * d + j] = want_plain[i * d + j] + pos[positions[i] * d + j];
          }
        }
        std::vector<float> out(count * d, NAN);
        EmbedTokens(out.data(), ids.data(), positions.data(), count, table.data(), pos.data(), d,
                    scale);
        ExpectAllNear(out, want_pos, what + " with positions");
        std::fill(out.begin(), out.end(), NAN);
        EmbedTokens(out.data(), ids.data(), nullptr, count, table.data(), nullptr, d, scale);
        ExpectAllNear(out, want_plain, what + " no positions");
      }
    }
  }
}

TEST(SinusoidalPositions, InterleavedSinCos) {
  for (int d : {1, 2, 3, 7, 8, 33, 512}) {
    const int rows = d == 512 ? 1030 : 65;
    std::vector<float> table(static_cast<size_t>(rows) * d, NAN);
    SinusoidalPositions(table.data(), rows, d);
    std::vector<double> want(table.size());
    for (int p = 0; p < rows; ++p) {
      for (int c = 0; c < d; ++c) {
        const int two_i = c - c % 2;  // column 2i holds sin, column 2i+1 holds cos
        const double angle = p / std::pow(10000.0, static_cast<double>(two_i) / d);
        want[static_cast<size_t>(p) * d + c] = c % 2 == 0 ? std::sin(angle) : std::cos(angle);
      }
    }
    ExpectAllNear(table, want, "SinusoidalPositions d=" + std::to_string(d), 1e-6, 0.0);
  }
}

TEST(SinusoidalPositions, SpotValues) {
  const int d = 4;
  float t[3 * d];
  SinusoidalPositions(t, 3, d);
  // Row 0: sin(0)=0 in even columns, cos(0)=1 in odd columns.
  EXPECT_EQ(t[0], 0.0f);
  EXPECT_EQ(t[1], 1.0f);
  EXPECT_EQ(t[2], 0.0f);
  EXPECT_EQ(t[3], 1.0f);
  // Row 2: frequencies 1 and 10000^(-2/4) = 0.01.
  EXPECT_NEAR(t[2 * d + 0], std::sin(2.0), 1e-7);
  EXPECT_NEAR(t[2 * d + 1], std::cos(2.0), 1e-7);
  EXPECT_NEAR(t[2 * d + 2], std::sin(0.02), 1e-7);
  EXPECT_NEAR(t[2 * d + 3], std::cos(0.02), 1e-7);
}

}  // namespace
}  // namespace tnmt::kernels::cpu
