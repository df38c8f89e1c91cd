// The decoder step's kernels only the GPU has: the per-row log-sum-exp with a picked logit
// against kernels/cpu LogSumExp, row gathers of slot tables and cache rows against a host copy,
// and the argument errors. The slot-table reorder and the row scatters, which both devices have,
// are tested once for every device in kernels/testing/step_ops_devices_test.cc.
#include "kernels/cuda/step_ops.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/test_util.h"

namespace tnmt::kernels::cuda {
namespace {

using testing::CudaTest;

class StepOpsTest : public CudaTest {};

TEST_F(StepOpsTest, BadArguments) {
  int32_t* d_dst = Alloc<int32_t>(9);
  EXPECT_FALSE(ReorderSlotTables(*ctx_, d_dst, d_dst, 0, nullptr, nullptr, nullptr, 1).ok());  // stride 0
  EXPECT_FALSE(ScatterRows(*ctx_, nullptr, 4, nullptr, nullptr, 4, nullptr, -1, 4).ok());
}

TEST_F(StepOpsTest, LogSumExpAndPickMatchesCpu) {
  for (int n : {1, 31, 257, 8000}) {
    const int rows = 6;
    std::vector<float> x = Random(static_cast<size_t>(rows) * n, 0.0f, 4.0f);
    x[n - 1] = 60.0f;  // a dominant logit
    std::vector<float> want(rows);
    cpu::LogSumExp(want.data(), x.data(), rows, n);
    const int32_t pick = n / 2;
    float* d_lse = Alloc<float>(rows);
    float* d_pick = Alloc<float>(rows);
    ASSERT_TRUE(LogSumExpAndPick(*ctx_, d_lse, d_pick, ToDevice(x), rows, n, pick).ok());
    const std::vector<float> lse = ToHost(d_lse, rows), picked = ToHost(d_pick, rows);
    for (int r = 0; r < rows; ++r) {
      EXPECT_NEAR(lse[r], want[r], 1e-5 * (1.0 + std::fabs(want[r]))) << "n " << n << " row " << r;
      EXPECT_EQ(picked[r], x[static_cast<size_t>(r) * n + pick]) << "n " << n << " row " << r;
    }
  }
  EXPECT_FALSE(LogSumExpAndPick(*ctx_, nullptr, nullptr, nullptr, 1, 4, 4).ok());
}

TEST_F(StepOpsTest, GatherRowsMatchesHostCopy) {
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
