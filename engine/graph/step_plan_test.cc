// PlanStep and PlanAttention: the rows' positions, sources, valid keys, table rows and new
// slots of a step, padding rows, and the errors that leave the rows as they were.
#include "engine/graph/step_plan.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tnmt::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

KvIndex::Grow NoOpGrow() {
  return [](int, int) { return absl::OkStatus(); };
}

// Two sources (lengths 3 and 1); rows 0, 1 on source 0 and row 2 on source 1.
void ThreeRows(KvIndex* index) {
  const int32_t lengths[] = {3, 1};
  ASSERT_TRUE(index->Reserve(KvIndex::kCross, 4, NoOpGrow()).ok());
  auto ids = index->AddSources(lengths, 2, 3);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_TRUE(index->Reorder({}, {0, 0, 1}).ok());
}

// Each test starts from ThreeRows, with an empty plan and no padding slots.
class StepPlanTest : public ::testing::Test {
 protected:
  void SetUp() override { ThreeRows(&index); }
  KvIndex index;
  StepPlan plan;
  std::vector<int32_t> pads;
};

TEST_F(StepPlanTest, OneStepOfThreeRows) {
  ASSERT_TRUE(PlanStep(index, 1, 3, 10, NoOpGrow(), &pads, &plan).ok());
  EXPECT_EQ(plan.rows, 3);
  EXPECT_EQ(plan.padded, 3);
  EXPECT_THAT(plan.pos, ElementsAre(0, 0, 0));
  EXPECT_THAT(plan.positions, ElementsAre(0, 0, 0));
  EXPECT_THAT(plan.sources, ElementsAre(0, 0, 1));
  EXPECT_THAT(plan.valid, ElementsAre(1, 1, 1));
  EXPECT_THAT(plan.map, ElementsAre(-1, -1, -1));  // new rows: nothing decoded yet
  EXPECT_THAT(plan.slots, ElementsAre(0, 1, 2));   // lowest self slots first
  EXPECT_EQ(plan.first_slot, plan.slots);
  EXPECT_EQ(plan.furthest, 1);
  EXPECT_EQ(plan.src_longest, 3);
  EXPECT_TRUE(pads.empty());
  index.TablesGathered();
  index.Advance(1);
  // Beam search keeps row 1 twice and drops row 0: the next step's map says where each row's
  // ancestry is, and the rows are at position 1.
  ASSERT_TRUE(index.Reorder({1, 1, 2}).ok());
  ASSERT_TRUE(PlanStep(index, 1, 3, 10, NoOpGrow(), &pads, &plan).ok());
  EXPECT_THAT(plan.map, ElementsAre(1, 1, 2));
  EXPECT_THAT(plan.positions, ElementsAre(1, 1, 1));
  EXPECT_THAT(plan.valid, ElementsAre(2, 2, 2));
  EXPECT_EQ(plan.furthest, 2);
}

TEST_F(StepPlanTest, PaddingRowsDecodePadAtPositionZeroOnSlotsKeptForThem) {
  ASSERT_TRUE(PlanStep(index, 1, 5, 10, NoOpGrow(), &pads, &plan).ok());
  EXPECT_EQ(plan.padded, 5);
  EXPECT_EQ(pads.size(), 2u);
  EXPECT_THAT(plan.pos, ElementsAre(0, 0, 0, 0, 0));
  EXPECT_THAT(plan.sources, ElementsAre(0, 0, 1, 0, 0));  // padding attends to row 0's source
  EXPECT_THAT(plan.map, ElementsAre(-1, -1, -1, -1, -1));
  EXPECT_EQ(plan.slots[3], pads[0]);
  EXPECT_EQ(plan.slots[4], pads[1]);
  // The padding slots are kept: a later step takes none again.
  index.TablesGathered();
  index.Advance(1);
  const std::vector<int32_t> kept = pads;
  ASSERT_TRUE(PlanStep(index, 1, 5, 10, NoOpGrow(), &pads, &plan).ok());
  EXPECT_EQ(pads, kept);
  EXPECT_EQ(plan.slots[3], pads[0]);
}

TEST_F(StepPlanTest, SeveralPositionsAtOnce) {
  ASSERT_TRUE(PlanStep(index, 3, 3, 10, NoOpGrow(), &pads, &plan).ok());
  EXPECT_EQ(plan.positions.size(), 9u);
  EXPECT_THAT(plan.positions, ElementsAre(0, 1, 2, 0, 1, 2, 0, 1, 2));
  EXPECT_THAT(plan.valid, ElementsAre(3, 3, 3));
  EXPECT_THAT(plan.first_slot, ElementsAre(plan.slots[0], plan.slots[3], plan.slots[6]));
  const StepAttention a = PlanAttention(ModelConfig(), plan, 10, nullptr, plan.valid.data(), plan.sources.data(),
                                        index.src_lengths().data(), index.src_slots().data(), index.src_stride(),
                                        /*fixed_bounds=*/false);
  EXPECT_EQ(a.self.q_len, 3);
  EXPECT_EQ(a.self.k_len, 3);
  EXPECT_EQ(a.self.causal_offset, 0);  // causal within the new positions
  EXPECT_EQ(a.cross.k_len, 3);
  EXPECT_EQ(a.cross.causal_offset, -1);
  const StepAttention fixed = PlanAttention(ModelConfig(), plan, 10, nullptr, plan.valid.data(),
                                            plan.sources.data(), index.src_lengths().data(),
                                            index.src_slots().data(), index.src_stride(), /*fixed_bounds=*/true);
  EXPECT_EQ(fixed.self.k_len, 10);
  EXPECT_EQ(fixed.cross.k_len, index.src_stride());
}

TEST_F(StepPlanTest, ErrorsLeaveTheRowsAsTheyWere) {
  absl::Status s = PlanStep(index, 11, 3, 10, NoOpGrow(), &pads, &plan);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("decoder cache holds 10 positions; position 11 requested"));
  s = PlanStep(index, 1, 3, 10, [](int, int) { return absl::ResourceExhaustedError("no memory"); }, &pads, &plan);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(index.free_slots(KvIndex::kSelf), 0);
  // Rows at different positions cannot take several positions at once.
  ASSERT_TRUE(PlanStep(index, 1, 3, 10, NoOpGrow(), &pads, &plan).ok());
  index.TablesGathered();
  index.Advance(1);
  ASSERT_TRUE(index.Reorder({0}, {1}).ok());  // row 0 at position 1, a new row at 0
  s = PlanStep(index, 2, 2, 10, NoOpGrow(), &pads, &plan);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("need rows at the same position"));
}

}  // namespace
}  // namespace tnmt::graph
