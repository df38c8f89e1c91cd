// KvIndex: slot pools, sources and rows, and the errors for misuse.
#include "engine/graph/kv_index.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tnmt::graph {
namespace {

using ::testing::HasSubstr;

// A Grow that records the calls and never fails.
struct Recorder {
  std::vector<std::pair<int, int>> calls;
  KvIndex::Grow grow() {
    return [this](int from, int to) {
      calls.push_back({from, to});
      return absl::OkStatus();
    };
  }
};

TEST(KvIndexTest, PoolsGrowByDoublingAndHandOutLowestSlotsFirst) {
  KvIndex index;
  Recorder r;
  ASSERT_TRUE(index.Reserve(KvIndex::kSelf, 10, r.grow()).ok());
  ASSERT_TRUE(index.Reserve(KvIndex::kSelf, 64, r.grow()).ok());  // already free: no growth
  EXPECT_EQ(index.capacity(KvIndex::kSelf), 64);
  EXPECT_EQ(index.TakeSlot(KvIndex::kSelf), 0);
  EXPECT_EQ(index.TakeSlot(KvIndex::kSelf), 1);
  ASSERT_TRUE(index.Reserve(KvIndex::kSelf, 100, r.grow()).ok());
  EXPECT_EQ(index.capacity(KvIndex::kSelf), 128);  // 62 free + 66 new >= 100
  EXPECT_EQ(r.calls, (std::vector<std::pair<int, int>>{{0, 64}, {64, 128}}));
  EXPECT_EQ(index.capacity(KvIndex::kCross), 0);
}

TEST(KvIndexTest, FailedGrowthChangesNothing) {
  KvIndex index("test cache");
  const absl::Status s = index.Reserve(KvIndex::kCross, 5, [](int, int) {
    return absl::ResourceExhaustedError("no memory");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(index.capacity(KvIndex::kCross), 0);
  EXPECT_EQ(index.free_slots(KvIndex::kCross), 0);
}

TEST(KvIndexTest, SourcesTakeCrossSlotsAndReleaseThem) {
  KvIndex index("test cache");
  Recorder r;
  const int32_t lengths[] = {3, 1};
  ASSERT_TRUE(index.Reserve(KvIndex::kCross, 4, r.grow()).ok());
  absl::StatusOr<std::vector<int32_t>> ids = index.AddSources(lengths, 2, 3);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(index.live_sources(), 2);
  EXPECT_EQ(index.src_stride(), 3);
  EXPECT_EQ(index.src_slot(0, 0), 0);
  EXPECT_EQ(index.src_slot(0, 2), 2);
  EXPECT_EQ(index.src_slot(1, 0), 3);
  EXPECT_EQ(index.src_lengths(), (std::vector<int32_t>{3, 1}));
  const int64_t free_before = index.free_slots(KvIndex::kCross);
  ASSERT_TRUE(index.ReleaseSource(0).ok());
  EXPECT_EQ(index.free_slots(KvIndex::kCross), free_before + 3);
  EXPECT_EQ(index.src_lengths()[0], 0);
  EXPECT_FALSE(index.live(0));
  // The freed id is reused first.
  const int32_t one[] = {2};
  ids = index.AddSources(one, 1, 2);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, std::vector<int32_t>{0});
  EXPECT_THAT(index.ReleaseSource(7).message(), HasSubstr("test cache: no live source 7"));
}

TEST(KvIndexTest, AddSourcesChecksLengthsAndReservation) {
  KvIndex index;
  const int32_t bad[] = {0};
  EXPECT_EQ(index.AddSources(bad, 1, 4).status().code(), absl::StatusCode::kInvalidArgument);
  const int32_t good[] = {2};
  EXPECT_EQ(index.AddSources(good, 1, 4).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(index.live_sources(), 0);
}

TEST(KvIndexTest, ReorderComposesMapsAndSlotsFollowTheirSource) {
  KvIndex index("test cache");
  Recorder r;
  const int32_t lengths[] = {2, 2};
  ASSERT_TRUE(index.Reserve(KvIndex::kCross, 4, r.grow()).ok());
  ASSERT_TRUE(index.AddSources(lengths, 2, 2).ok());
  ASSERT_TRUE(index.Reorder({}, {0, 0, 1}).ok());
  EXPECT_EQ(index.row_map(), (std::vector<int32_t>{-1, -1, -1}));
  ASSERT_TRUE(index.Reserve(KvIndex::kSelf, 3, r.grow()).ok());
  for (int row = 0; row < 3; ++row) index.TakeRowSlot(row);
  index.TablesGathered();
  index.Advance(1);
  EXPECT_EQ(index.row_pos(), (std::vector<int32_t>{1, 1, 1}));
  EXPECT_EQ(index.row_map(), (std::vector<int32_t>{0, 1, 2}));
  // Beam reorder: both rows of source 0 continue row 1; then a new row of source 1.
  ASSERT_TRUE(index.Reorder({1, 1, 2}, {1}).ok());
  EXPECT_EQ(index.row_map(), (std::vector<int32_t>{1, 1, 2, -1}));
  EXPECT_EQ(index.row_pos(), (std::vector<int32_t>{1, 1, 1, 0}));
  EXPECT_EQ(index.row_source(), (std::vector<int32_t>{0, 0, 1, 1}));
  // A second reorder before the next step composes with the first.
  ASSERT_TRUE(index.Reorder({3, 0}).ok());
  EXPECT_EQ(index.row_map(), (std::vector<int32_t>{-1, 1}));
  EXPECT_THAT(index.ReleaseSource(0).message(), HasSubstr("source still has live rows"));
  // Releasing source 1's rows, then the source, frees its two self slots and two cross slots.
  ASSERT_TRUE(index.Reorder({1}).ok());
  const int64_t self_free = index.free_slots(KvIndex::kSelf);
  ASSERT_TRUE(index.ReleaseSource(1).ok());
  EXPECT_EQ(index.free_slots(KvIndex::kSelf), self_free + 1);  // row 2's slot (source 1)
  EXPECT_THAT(index.Reorder({5}).message(), HasSubstr("test cache::Reorder: bad parent"));
  EXPECT_THAT(index.Reorder({}, {1}).message(), HasSubstr("no live source 1"));
}

}  // namespace
}  // namespace tnmt::graph
