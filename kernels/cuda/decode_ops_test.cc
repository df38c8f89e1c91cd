// Decode-path kernels against the CPU: embeddings with sinusoidal positions (float32, float16
// and bfloat16 tables) against kernels/cpu EmbedTokens / SinusoidalPositions; beam top-k
// against a full sort with the engine's order (value descending, then lower token id) on
// rows with many ties, -inf, NaN and an excluded pad id; row gathers of slot tables and
// cache rows against a host copy.
#include "kernels/cuda/decode_ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/test_util.h"

namespace tnmt::kernels::cuda {
namespace {

using testing::CudaTest;
using testing::MaxScaledError;

class DecodeOpsTest : public CudaTest {};

TEST_F(DecodeOpsTest, SinusoidalPositionsMatchCpu) {
  for (auto [rows, d] : {std::pair<int, int>{300, 512}, {17, 7}, {1, 1}, {1024, 1024}}) {
    std::vector<float> want(static_cast<size_t>(rows) * d);
    cpu::SinusoidalPositions(want.data(), rows, d);
    float* dt = Alloc<float>(want.size());
    Poison(dt, want.size() * sizeof(float));
    ASSERT_TRUE(SinusoidalPositions(*ctx_, dt, rows, d).ok());
    const double err = MaxScaledError(ToHost(dt, want.size()), want);
    EXPECT_LE(err, 1e-6) << rows << "x" << d;
  }
}

TEST_F(DecodeOpsTest, EmbedTokensMatchesCpuForEachTableType) {
  const int vocab = 1000, d = 512, count = 77, max_pos = 128;
  std::vector<float> table = Random(static_cast<size_t>(vocab) * d, 0.0f, 0.1f);
  std::vector<float> pos(static_cast<size_t>(max_pos) * d);
  cpu::SinusoidalPositions(pos.data(), max_pos, d);
  std::vector<int32_t> ids(count), positions(count);
  std::uniform_int_distribution<int> tok(0, vocab - 1), p(0, max_pos - 1);
  for (int i = 0; i < count; ++i) {
    ids[i] = tok(rng_);
    positions[i] = p(rng_);
  }
  const float scale = std::sqrt(static_cast<float>(d));
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    // The table as stored, and as float32 for the CPU (as the engine converts it on load).
    std::vector<uint16_t> half(table.size());
    std::vector<float> as_float(table.size());
    for (size_t i = 0; i < table.size(); ++i) {
      if (t == DType::kFloat16) {
        const __half h = __float2half_rn(table[i]);
        std::memcpy(&half[i], &h, 2);
      } else if (t == DType::kBFloat16) {
        const __nv_bfloat16 h = __float2bfloat16_rn(table[i]);
        std::memcpy(&half[i], &h, 2);
      }
    }
    const void* dtable;
    if (t == DType::kFloat32) {
      as_float = table;
      dtable = ToDevice(table);
    } else {
      if (t == DType::kFloat16) cpu::HalfToFloat(as_float.data(), half.data(), half.size());
      else cpu::BFloat16ToFloat(as_float.data(), half.data(), half.size());
      dtable = ToDevice(half);
    }
    for (bool with_pos : {true, false}) {
      std::vector<float> want(static_cast<size_t>(count) * d);
      cpu::EmbedTokens(want.data(), ids.data(), positions.data(), count, as_float.data(),
                       with_pos ? pos.data() : nullptr, d, scale);
      float* dout = Alloc<float>(want.size());
      Poison(dout, want.size() * sizeof(float));
      ASSERT_TRUE(EmbedTokens(*ctx_, dout, ToDevice(ids), ToDevice(positions), count, dtable, t,
                              with_pos ? ToDevice(pos) : nullptr, d, scale)
                      .ok());
      EXPECT_LE(MaxScaledError(ToHost(dout, want.size()), want), 1e-6) << DTypeName(t);
    }
  }
}

// The engine's order: larger value first, ties by lower id; NaN below everything.
bool Better(float a, int ia, float b, int ib) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na != nb) return nb;
  if (!na && a != b) return a > b;
  return ia < ib;
}

TEST_F(DecodeOpsTest, TopKMatchesFullSort) {
  struct Case {
    int rows, n, k, exclude;
    bool ties;
  };
  const Case cases[] = {{64, 32000, 8, 1, false},  {128, 8000, 4, 1, false}, {16, 32000, 64, 0, true},
                        {9, 8000, 256, -1, true},  {5, 37, 36, 3, true},     {3, 1, 1, -1, false},
                        {7, 1000, 1, 999, true},   {256, 32000, 64, 1, false}};
  for (const Case& c : cases) {
    std::vector<float> x = Random(static_cast<size_t>(c.rows) * c.n, 0.0f, 3.0f);
    std::uniform_int_distribution<int> pick(0, c.n - 1);
    for (int r = 0; r < c.rows; ++r) {
      float* row = x.data() + static_cast<size_t>(r) * c.n;
      if (c.ties) {
        for (int j = 0; j < c.n; ++j) row[j] = std::round(row[j] * 2.0f) / 2.0f;  // many ties
        if (r == 0) std::fill(row, row + c.n, 1.25f);                           // all tied
      }
      if (c.n > 4) {
        row[pick(rng_)] = -INFINITY;
        row[pick(rng_)] = NAN;
        if (r == 1) row[pick(rng_)] = INFINITY;
        if (r == 2) row[pick(rng_)] = -0.0f;
      }
      if (c.exclude >= 0) row[c.exclude] = 100.0f;  // would win if not excluded
    }
    float* dvals = Alloc<float>(static_cast<size_t>(c.rows) * c.k);
    int32_t* dids = Alloc<int32_t>(static_cast<size_t>(c.rows) * c.k);
    Poison(dids, static_cast<size_t>(c.rows) * c.k * sizeof(int32_t));
    ASSERT_TRUE(TopK(*ctx_, dvals, dids, ToDevice(x), c.rows, c.n, c.k, c.exclude).ok());
    std::vector<float> vals = ToHost(dvals, static_cast<size_t>(c.rows) * c.k);
    std::vector<int32_t> ids = ToHost(dids, static_cast<size_t>(c.rows) * c.k);
    int mismatches = 0;
    for (int r = 0; r < c.rows; ++r) {
      const float* row = x.data() + static_cast<size_t>(r) * c.n;
      std::vector<int> order;
      for (int j = 0; j < c.n; ++j) {
        if (j != c.exclude) order.push_back(j);
      }
      std::sort(order.begin(), order.end(), [&](int a, int b) { return Better(row[a], a, row[b], b); });
      for (int t = 0; t < c.k; ++t) {
        const int32_t want = order[t];
        const int32_t got = ids[static_cast<size_t>(r) * c.k + t];
        const float gv = vals[static_cast<size_t>(r) * c.k + t];
        const bool same_value = std::isnan(row[want]) ? std::isnan(gv) : gv == row[want];
        // -0 and +0 tie: then only the order by id matters, which the id check covers.
        if (got != want || !same_value) {
          if (++mismatches <= 5) {
            ADD_FAILURE() << "rows=" << c.rows << " n=" << c.n << " k=" << c.k << " row " << r
                          << " rank " << t << ": got id " << got << " (" << gv << "), want "
                          << want << " (" << row[want] << ")";
          }
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << "rows=" << c.rows << " n=" << c.n << " k=" << c.k;
  }
  EXPECT_EQ(TopK(*ctx_, nullptr, nullptr, nullptr, 1, 10, 10, 3).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TopK(*ctx_, nullptr, nullptr, nullptr, 1, 1000, kMaxTopK + 1, -1).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DecodeOpsTest, GatherRowsMatchesHostCopy) {
  std::uniform_int_distribution<int> any(0, 1 << 30);
  // Slot tables ([rows, max_steps] int32, as DecoderState::Reorder copies them), float cache
  // rows (16-byte path), and odd byte rows with odd strides (byte path).
  struct Case {
    int rows, src_rows;
    int64_t row_bytes, dst_stride, src_stride;
  };
  const Case cases[] = {{12, 12, 4 * 256, 4 * 256, 4 * 256},
                        {128, 32, 4 * 1024, 4 * 1024, 4 * 1024},
                        {9, 5, 13, 17, 19},
                        {40, 40, 4 * 3, 4 * 5, 4 * 7}};
  for (const Case& c : cases) {
    std::vector<uint8_t> src(c.src_rows * c.src_stride), dst(c.rows * c.dst_stride, 0xab);
    for (uint8_t& b : src) b = static_cast<uint8_t>(any(rng_));
    std::vector<int32_t> index(c.rows);
    for (int32_t& i : index) i = any(rng_) % c.src_rows;
    std::vector<uint8_t> want = dst;
    for (int r = 0; r < c.rows; ++r) {
      std::memcpy(want.data() + r * c.dst_stride, src.data() + index[r] * c.src_stride, c.row_bytes);
    }
    uint8_t* ddst = ToDevice(dst);
    ASSERT_TRUE(GatherRows(*ctx_, ddst, c.dst_stride, ToDevice(src), c.src_stride, ToDevice(index),
                           c.rows, c.row_bytes)
                    .ok());
    EXPECT_EQ(ToHost(ddst, dst.size()), want) << "rows " << c.rows << " bytes " << c.row_bytes;
  }
}

}  // namespace
}  // namespace tnmt::kernels::cuda
