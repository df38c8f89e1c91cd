// Checkpoint timing by steps, by minutes, both, and across a resume.
#include "trainer/checkpoint/schedule.h"

#include <vector>

#include <gtest/gtest.h>

namespace tnmt {
namespace {

// Steps from..to at `seconds_per_step`, saving whenever due; returns the saved steps.
std::vector<int64_t> SavedSteps(CheckpointTimer* timer, int64_t from, int64_t to, double seconds_per_step) {
  std::vector<int64_t> saved;
  for (int64_t step = from; step <= to; ++step) {
    const double t = step * seconds_per_step;
    if (timer->Due(step, t)) {
      saved.push_back(step);
      timer->Saved(step, t);
    }
  }
  return saved;
}

TEST(CheckpointTimerTest, EveryNSteps) {
  CheckpointTimer timer({/*every_steps=*/100, /*every_minutes=*/0}, 0, 0);
  EXPECT_EQ(SavedSteps(&timer, 1, 350, 1.0), (std::vector<int64_t>{100, 200, 300}));
}

TEST(CheckpointTimerTest, EveryMMinutes) {
  CheckpointTimer timer({/*every_steps=*/0, /*every_minutes=*/1}, 0, 0);
  // 25 s per step: 60 s pass after 3 steps (75 s), then 3 more each time.
  EXPECT_EQ(SavedSteps(&timer, 1, 10, 25.0), (std::vector<int64_t>{3, 6, 9}));
}

TEST(CheckpointTimerTest, StepsOrMinutesWhicheverComesFirst) {
  CheckpointTimer timer({/*every_steps=*/4, /*every_minutes=*/1}, 0, 0);
  EXPECT_EQ(SavedSteps(&timer, 1, 12, 25.0), (std::vector<int64_t>{3, 4, 7, 8, 11, 12}));
}

TEST(CheckpointTimerTest, NeverWithoutASchedule) {
  CheckpointTimer timer({0, 0}, 0, 0);
  EXPECT_TRUE(SavedSteps(&timer, 1, 1000, 100.0).empty());
}

TEST(CheckpointTimerTest, ResumeContinuesTheSameSchedule) {
  CheckpointTimer whole({10, 0}, 0, 0);
  const std::vector<int64_t> uninterrupted = SavedSteps(&whole, 1, 50, 1.0);
  CheckpointTimer first({10, 0}, 0, 0);
  std::vector<int64_t> resumed = SavedSteps(&first, 1, 23, 1.0);  // killed at step 23
  CheckpointTimer second({10, 0}, /*last_step=*/20, /*last_seconds=*/20.0);
  EXPECT_FALSE(second.Due(20, 20.0));
  for (int64_t s : SavedSteps(&second, 21, 50, 1.0)) resumed.push_back(s);
  EXPECT_EQ(resumed, uninterrupted);
}

}  // namespace
}  // namespace tnmt
