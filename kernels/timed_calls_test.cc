// TimedCalls' bookkeeping over a fake event API whose clock the test moves: work by category,
// gaps inside and between steps, nested calls counted once, nothing recorded when off or while
// capturing, events reused window after window, full pools flushed without losing a call or a
// gap, the counters' increase per window, recording errors, and the environment switch.
#include "kernels/timed_calls.h"

#include <cstdlib>
#include <vector>

#include "gtest/gtest.h"

namespace tnmt::kernels {
namespace {

// Events are indices into `time` (the fake clock when last recorded, -1 before).
struct FakeClock {
  double now = 0;
  std::vector<double> time;
  bool capturing = false;
  bool fail_record = false;
  int waits = 0;
  int records = 0;
  int destroyed = 0;
};

struct FakeEvents {
  using Event = int;
  using Stream = int;
  FakeClock* clock = nullptr;
  absl::Status Create(Event* e) const {
    *e = static_cast<int>(clock->time.size());
    clock->time.push_back(-1);
    return absl::OkStatus();
  }
  void Destroy(Event) const { ++clock->destroyed; }
  absl::Status Record(Event e, Stream) const {
    if (clock->fail_record) return absl::InternalError("record failed");
    ++clock->records;
    clock->time[e] = clock->now;
    return absl::OkStatus();
  }
  bool Capturing(Stream) const { return clock->capturing; }
  absl::Status Wait(Event) const {
    ++clock->waits;
    return absl::OkStatus();
  }
  absl::Status Elapsed(float* ms, Event from, Event to) const {
    if (clock->time[from] < 0 || clock->time[to] < 0) return absl::InternalError("unrecorded event");
    *ms = static_cast<float>(clock->time[to] - clock->time[from]);
    return absl::OkStatus();
  }
};

using Timeline = TimedCalls<FakeEvents>;

class TimedCallsTest : public ::testing::Test {
 protected:
  // One timed call of `ms` device milliseconds, after `gap` idle ones.
  void Call(Timeline& t, TimeCategory c, double ms, double gap = 0) {
    clock_.now += gap;
    Timeline::Scope s(t, /*stream=*/0, c);
    clock_.now += ms;
  }
  static double Work(const TimeAccount& a, TimeCategory c) { return a.work[static_cast<int>(c)].ms; }
  static int64_t Calls(const TimeAccount& a, TimeCategory c) { return a.work[static_cast<int>(c)].calls; }

  FakeClock clock_;
};

TEST_F(TimedCallsTest, OffRecordsNothing) {
  Timeline t(FakeEvents{&clock_});
  Call(t, TimeCategory::kGemm, 1.0);
  auto a = t.Take();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->empty());
  EXPECT_EQ(t.events_created(), 0);
  EXPECT_EQ(clock_.records, 0);
  EXPECT_EQ(clock_.waits, 0);
}

TEST_F(TimedCallsTest, WorkGapsAndSteps) {
  Timeline t(FakeEvents{&clock_});
  t.set_enabled(true);
  for (int step = 0; step < 3; ++step) {
    clock_.now += 5;  // the host between steps
    t.StepBoundary();
    Call(t, TimeCategory::kGemm, 2.0);
    Call(t, TimeCategory::kAttentionForward, 1.0, /*gap=*/0.5);
    {
      Timeline::Scope outer(t, 0, TimeCategory::kLoss);  // one call: the nested one is its part
      clock_.now += 0.25;
      Call(t, TimeCategory::kGemm, 0.75);
    }
  }
  EXPECT_EQ(clock_.waits, 0);  // nothing waits while recording
  auto a = t.Take();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(clock_.waits, 1);
  EXPECT_DOUBLE_EQ(Work(*a, TimeCategory::kGemm), 6.0);
  EXPECT_EQ(Calls(*a, TimeCategory::kGemm), 3);
  EXPECT_DOUBLE_EQ(Work(*a, TimeCategory::kAttentionForward), 3.0);
  EXPECT_DOUBLE_EQ(Work(*a, TimeCategory::kLoss), 3.0);
  EXPECT_EQ(Calls(*a, TimeCategory::kLoss), 3);
  EXPECT_EQ(a->Calls(), 9);
  EXPECT_DOUBLE_EQ(a->gap_ms, 1.5);        // 0.5 per step
  EXPECT_DOUBLE_EQ(a->between_ms, 10.0);   // two gaps between steps; none before the first call
  EXPECT_EQ(a->betweens, 2);
  EXPECT_DOUBLE_EQ(a->SpanMs(), 3 * 4.5 + 10.0);  // first call's start to the last's end
  EXPECT_GT(a->timing_host_ms, 0.0);
  EXPECT_EQ(t.events_created(), 18);

  // The next window reuses the events and starts without a gap.
  clock_.now += 100;
  Call(t, TimeCategory::kCopy, 1.0);
  Call(t, TimeCategory::kCopy, 1.0, /*gap=*/2.0);
  auto b = t.Take();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ(Work(*b, TimeCategory::kCopy), 2.0);
  EXPECT_EQ(Calls(*b, TimeCategory::kGemm), 0);
  EXPECT_DOUBLE_EQ(b->gap_ms, 2.0);
  EXPECT_DOUBLE_EQ(b->between_ms, 0.0);
  EXPECT_EQ(t.events_created(), 18);
}

TEST_F(TimedCallsTest, FullPoolFlushesWithoutLosingCallsOrGaps) {
  for (int max_events : {4, 5, 6, 8}) {
    SCOPED_TRACE(max_events);
    FakeClock clock;
    clock_ = clock;
    Timeline t(FakeEvents{&clock_}, max_events);
    t.set_enabled(true);
    for (int i = 0; i < 10; ++i) {
      if (i == 5) t.StepBoundary();
      Call(t, TimeCategory::kOther, 1.0 + i, /*gap=*/0.5 * i);
    }
    auto a = t.Take();
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(Calls(*a, TimeCategory::kOther), 10);
    EXPECT_DOUBLE_EQ(Work(*a, TimeCategory::kOther), 10.0 + 45.0);
    EXPECT_DOUBLE_EQ(a->gap_ms + a->between_ms, 0.5 * 45.0 - 0.0);  // every gap after the first call
    EXPECT_DOUBLE_EQ(a->between_ms, 2.5);
    EXPECT_EQ(a->betweens, 1);
    EXPECT_GT(a->flushes, 0);
    EXPECT_EQ(clock_.waits, a->flushes + 1);
    EXPECT_LE(t.events_created(), max_events);
  }
}

TEST_F(TimedCallsTest, NotRecordedWhileCapturing) {
  Timeline t(FakeEvents{&clock_});
  t.set_enabled(true);
  Call(t, TimeCategory::kGemm, 1.0);
  clock_.capturing = true;
  Call(t, TimeCategory::kAttentionForward, 1.0);
  clock_.capturing = false;
  Call(t, TimeCategory::kGraph, 3.0, /*gap=*/1.0);
  auto a = t.Take();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Calls(*a, TimeCategory::kAttentionForward), 0);
  EXPECT_EQ(Calls(*a, TimeCategory::kGraph), 1);
  EXPECT_DOUBLE_EQ(a->gap_ms, 2.0);  // the captured call's time is a gap
}

TEST_F(TimedCallsTest, CountersPerWindow) {
  Timeline t(FakeEvents{&clock_});
  t.set_enabled(true);
  auto a = t.Take(/*device_allocs=*/5, /*gemm_plans=*/3);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->device_allocs, 5);
  EXPECT_EQ(a->gemm_plans_built, 3);
  auto b = t.Take(7, 3);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->device_allocs, 2);
  EXPECT_EQ(b->gemm_plans_built, 0);
}

TEST_F(TimedCallsTest, HostPhasesGoWithTheWindow) {
  Timeline t(FakeEvents{&clock_});
  t.set_enabled(true);
  t.account().AddHost("beam search", 2.0);
  Call(t, TimeCategory::kTopK, 1.0);
  auto a = t.Take();
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->host.size(), 1u);
  EXPECT_DOUBLE_EQ(a->host[0].ms, 2.0);
  EXPECT_DOUBLE_EQ(t.account().host[0].ms, 0.0);  // the next window starts at zero
}

TEST_F(TimedCallsTest, ErrorsAreReportedOnceAndTimingGoesOn) {
  Timeline t(FakeEvents{&clock_});
  t.set_enabled(true);
  Call(t, TimeCategory::kGemm, 1.0);
  clock_.fail_record = true;
  Call(t, TimeCategory::kGemm, 1.0);
  clock_.fail_record = false;
  Call(t, TimeCategory::kGemm, 1.0);
  auto a = t.Take();
  EXPECT_FALSE(a.ok());
  Call(t, TimeCategory::kGemm, 1.0);
  auto b = t.Take();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(Calls(*b, TimeCategory::kGemm), 1);
}

TEST_F(TimedCallsTest, TakeInsideACallIsRefused) {
  Timeline t(FakeEvents{&clock_});
  t.set_enabled(true);
  Timeline::Scope s(t, 0, TimeCategory::kGemm);
  EXPECT_EQ(t.Take().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(TimedCallsTest, EventsDestroyedWithTheTimeline) {
  {
    Timeline t(FakeEvents{&clock_});
    t.set_enabled(true);
    Call(t, TimeCategory::kGemm, 1.0);
    Call(t, TimeCategory::kGemm, 1.0);
  }
  EXPECT_EQ(clock_.destroyed, 4);
}

TEST(TimedCallsEnvironment, OffUnlessAsked) {
  unsetenv("TNMT_GPU_TIMING");
  EXPECT_FALSE(TimedCalls<FakeEvents>::EnabledByEnvironment());
  setenv("TNMT_GPU_TIMING", "0", 1);
  EXPECT_FALSE(TimedCalls<FakeEvents>::EnabledByEnvironment());
  setenv("TNMT_GPU_TIMING", "", 1);
  EXPECT_FALSE(TimedCalls<FakeEvents>::EnabledByEnvironment());
  setenv("TNMT_GPU_TIMING", "1", 1);
  EXPECT_TRUE(TimedCalls<FakeEvents>::EnabledByEnvironment());
  unsetenv("TNMT_GPU_TIMING");
}

}  // namespace
}  // namespace tnmt::kernels
