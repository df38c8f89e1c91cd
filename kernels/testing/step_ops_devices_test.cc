// The decoder step's row movement (kernels/cpu/step_ops.h, kernels/cuda/step_ops.h), each test
// body run on every device (kernels/testing/devices.h) against naive element loops, exactly
// (copies): the slot-table reorder (rows continuing a parent, beams sharing one, new rows, this
// step's slot appended) and row scatters into a slot pool, with and without a source row map,
// narrow and wide rows, and nothing to copy. Entries no row writes must keep their values.
//
// On one device only: LogSumExpAndPick and GatherRows are CUDA kernels
// (kernels/cuda/step_ops_test.cc), with the argument errors the CUDA kernels return.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/step_ops.h"
#include "kernels/testing/devices.h"
#if TNMT_TEST_CUDA
#include "kernels/cuda/step_ops.h"
#endif

namespace tnmt::kernels {
namespace {

class StepOpsTest : public testing::DeviceTest {
 protected:
  absl::Status ReorderSlotTables(int32_t* dst, const int32_t* src, int64_t stride, const int32_t* map,
                                 const int32_t* positions, const int32_t* slots, int rows) {
    if (cpu()) return cpu::ReorderSlotTables(dst, src, stride, map, positions, slots, rows), absl::OkStatus();
    return TNMT_IF_CUDA(cuda::ReorderSlotTables(ctx(), dst, src, stride, map, positions, slots, rows));
  }
  absl::Status ScatterRows(float* dst, int64_t dst_stride, const int32_t* dst_rows, const float* src,
                           int64_t src_stride, const int32_t* src_rows, int64_t count, int width) {
    if (cpu()) {
      cpu::ScatterRows(dst, dst_stride, dst_rows, src, src_stride, src_rows, count, width);
      return absl::OkStatus();
    }
    return TNMT_IF_CUDA(
        cuda::ScatterRows(ctx(), dst, dst_stride, dst_rows, src, src_stride, src_rows, count, width));
  }
};

TEST_P(StepOpsTest, ReorderSlotTables) {
  struct Case {
    int64_t stride;
    int src_rows;
    std::vector<int32_t> map, positions, slots;  // one entry per row
  };
  const Case cases[] = {
      // Rows 0 and 2 continue source row 1, row 1 continues row 0, row 3 is new.
      {6, 3, {1, 0, 1, -1}, {4, 2, 5, 0}, {7, 8, 9, 10}},
      // Beams 0 and 1 continue row 2; row 2 is new; row 3 fills its table.
      {9, 5, {2, 2, -1, 0, 4}, {3, 3, 0, 8, 1}, {70, 71, 72, 73, 74}},
  };
  for (const Case& c : cases) {
    const int rows = static_cast<int>(c.map.size());
    SCOPED_TRACE(absl::StrCat("stride ", c.stride, " rows ", rows));
    std::vector<int32_t> src(c.src_rows * c.stride);
    for (size_t i = 0; i < src.size(); ++i) src[i] = 1000 + static_cast<int32_t>(i);
    std::vector<int32_t> want(rows * c.stride, -7);
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < c.positions[r]; ++j) want[r * c.stride + j] = src[c.map[r] * c.stride + j];
      want[r * c.stride + c.positions[r]] = c.slots[r];
    }
    int32_t* dst = Upload(std::vector<int32_t>(want.size(), -7));
    ASSERT_TRUE(ReorderSlotTables(dst, Upload(src), c.stride, Upload(c.map), Upload(c.positions),
                                  Upload(c.slots), rows)
                    .ok());
    EXPECT_EQ(Download(dst, want.size()), want);
  }
}

TEST_P(StepOpsTest, ScatterRows) {
  for (int width : {5, 300}) {
    for (bool with_map : {false, true}) {
      SCOPED_TRACE(absl::StrCat("width ", width, with_map ? " with a source row map" : ""));
      const int64_t src_stride = width + 10, dst_stride = width + 4, pool = 8;
      std::vector<float> src(6 * src_stride);
      for (size_t i = 0; i < src.size(); ++i) src[i] = 0.5f * static_cast<float>(i) - 3.0f;
      const std::vector<int32_t> dst_rows = {7, 0, 3, 5}, src_rows = {5, 1, 1, 0};
      std::vector<float> want(pool * dst_stride, -1.0f);
      for (size_t i = 0; i < dst_rows.size(); ++i) {
        const int64_t from = with_map ? src_rows[i] : static_cast<int64_t>(i);
        for (int j = 0; j < width; ++j) want[dst_rows[i] * dst_stride + j] = src[from * src_stride + j];
      }
      float* dst = Upload(std::vector<float>(want.size(), -1.0f));
      ASSERT_TRUE(ScatterRows(dst, dst_stride, Upload(dst_rows), Upload(src), src_stride,
                              with_map ? Upload(src_rows) : nullptr, static_cast<int64_t>(dst_rows.size()),
                              width)
                      .ok());
      EXPECT_EQ(Download(dst, want.size()), want);
    }
  }
  // Nothing to copy: no pointer is read.
  float* dst = Upload(std::vector<float>(4, 2.0f));
  ASSERT_TRUE(ScatterRows(dst, 4, nullptr, Upload(std::vector<float>(4, 1.0f)), 4, nullptr, 0, 4).ok());
  EXPECT_EQ(Download(dst, 4), std::vector<float>(4, 2.0f));
}

TNMT_INSTANTIATE_DEVICE_TEST(StepOpsTest);

}  // namespace
}  // namespace tnmt::kernels
