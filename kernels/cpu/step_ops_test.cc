// ReorderSlotTables and ScatterRows against naive element loops.
#include "kernels/cpu/step_ops.h"

#include <vector>

#include "gtest/gtest.h"

namespace tnmt::kernels::cpu {
namespace {

TEST(ReorderSlotTablesTest, MatchesElementLoop) {
  const int64_t stride = 6;
  const int src_rows = 3;
  std::vector<int32_t> src(src_rows * stride);
  for (size_t i = 0; i < src.size(); ++i) src[i] = 100 + static_cast<int32_t>(i);
  // Row 0 and 2 continue source row 1, row 1 continues row 0, row 3 is new.
  const std::vector<int32_t> map = {1, 0, 1, -1};
  const std::vector<int32_t> positions = {4, 2, 5, 0};
  const std::vector<int32_t> slots = {7, 8, 9, 10};
  const int rows = static_cast<int>(map.size());
  std::vector<int32_t> dst(rows * stride, -1), want = dst;
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < positions[r]; ++j) want[r * stride + j] = src[map[r] * stride + j];
    want[r * stride + positions[r]] = slots[r];
  }
  ReorderSlotTables(dst.data(), src.data(), stride, map.data(), positions.data(), slots.data(), rows);
  EXPECT_EQ(dst, want);
}

TEST(ScatterRowsTest, MatchesElementLoop) {
  const int width = 5;
  const int64_t src_stride = 7, dst_stride = 9, src_n = 6, dst_n = 8;
  std::vector<float> src(src_n * src_stride);
  for (size_t i = 0; i < src.size(); ++i) src[i] = 0.5f * static_cast<float>(i) - 3.0f;
  const std::vector<int32_t> dst_rows = {7, 0, 3, 5};
  for (bool indexed : {false, true}) {
    const std::vector<int32_t> src_rows = {4, 4, 1, 0};
    std::vector<float> dst(dst_n * dst_stride, -1.0f), want = dst;
    for (size_t i = 0; i < dst_rows.size(); ++i) {
      const int64_t from = indexed ? src_rows[i] : static_cast<int64_t>(i);
      for (int j = 0; j < width; ++j) want[dst_rows[i] * dst_stride + j] = src[from * src_stride + j];
    }
    ScatterRows(dst.data(), dst_stride, dst_rows.data(), src.data(), src_stride,
                indexed ? src_rows.data() : nullptr, static_cast<int64_t>(dst_rows.size()), width);
    EXPECT_EQ(dst, want) << (indexed ? "indexed" : "identity") << " source rows";
  }
}

TEST(ScatterRowsTest, NothingToCopy) {
  std::vector<float> dst(4, 2.0f);
  const float src[4] = {1, 1, 1, 1};
  ScatterRows(dst.data(), 4, nullptr, src, 4, nullptr, 0, 4);
  EXPECT_EQ(dst, std::vector<float>(4, 2.0f));
}

}  // namespace
}  // namespace tnmt::kernels::cpu
