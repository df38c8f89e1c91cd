// PlanSource against hand-worked packings: rows, positions, K/V groups and keys per group; the
// attention arguments it gives; and the errors for bad lengths.
#include "engine/graph/source_plan.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tnmt::graph {
namespace {

using ::testing::ElementsAre;

TEST(SourcePlanTest, PacksValidPositionsSentenceAfterSentence) {
  // [3, 4] padded ids: lengths 2, 4, 1 (9 = padding).
  const std::vector<int32_t> ids = {5, 6, 9, 9, 7, 8, 10, 11, 12, 9, 9, 9};
  const std::vector<int32_t> lengths = {2, 4, 1};
  auto plan = PlanSource(ids.data(), lengths.data(), 3, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->rows, 7);
  EXPECT_EQ(plan->max_len, 4);
  EXPECT_THAT(plan->ids, ElementsAre(5, 6, 7, 8, 10, 11, 12));
  EXPECT_THAT(plan->positions, ElementsAre(0, 1, 0, 1, 2, 3, 0));
  EXPECT_THAT(plan->group, ElementsAre(0, 0, 2, 2, 2, 2, 6));
  EXPECT_THAT(plan->valid, ElementsAre(2, 0, 4, 0, 0, 0, 1));

  ModelConfig c;
  c.d_model = 16;
  c.num_heads = 4;
  const AttentionArgs a = SourceSelfAttention(c, *plan, plan->group.data(), plan->valid.data());
  EXPECT_EQ(a.batch, 7);
  EXPECT_EQ(a.q_len, 1);
  EXPECT_EQ(a.k_len, 4);
  EXPECT_EQ(a.num_heads, 4);
  EXPECT_EQ(a.d_head, 4);
  EXPECT_FLOAT_EQ(a.scale, 0.5f);
  EXPECT_EQ(a.kv_index, plan->group.data());
  EXPECT_EQ(a.k_valid, plan->valid.data());
}

TEST(SourcePlanTest, RefusesLengthsOutsideOneToMaxLen) {
  const std::vector<int32_t> ids(8, 1);
  for (const std::vector<int32_t>& lengths : {std::vector<int32_t>{0, 2}, std::vector<int32_t>{2, 5},
                                              std::vector<int32_t>{-1, 1}}) {
    auto plan = PlanSource(ids.data(), lengths.data(), 2, 4);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(plan.status().message().find("positions, outside [1, 4]"), std::string::npos)
        << plan.status();
  }
}

}  // namespace
}  // namespace tnmt::graph
