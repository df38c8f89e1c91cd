// In-process collectives: all-reduce of floats and doubles and broadcast across 1-4 threads,
// identical results on every rank, repeated calls (barrier reuse), bad roots; RunInProcessGroup:
// a failed rank stops the ranks waiting for it and its error is the result, naming it.
#include "trainer/collective/collective.h"

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace tnmt::train {
namespace {

TEST(CollectiveTest, SingleProcessIsIdentity) {
  auto c = MakeSingleProcessCollective();
  float x[3] = {1, 2, 3};
  ASSERT_TRUE(c->AllReduceSum(x, 3).ok());
  EXPECT_EQ(x[2], 3.0f);
  EXPECT_EQ(c->world_size(), 1);
  EXPECT_FALSE(c->Broadcast(x, 3, 1).ok());
}

TEST(CollectiveTest, InProcessAllReduceAndBroadcast) {
  for (int n : {1, 2, 3, 4}) {
    auto group = MakeInProcessGroup(n);
    std::vector<std::vector<float>> data(n);
    std::vector<std::vector<double>> ddata(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        for (int round = 0; round < 5; ++round) {
          data[r].assign(1001, 0.0f);
          for (int i = 0; i < 1001; ++i) data[r][i] = static_cast<float>(r * 1000 + i + round);
          ASSERT_TRUE(group[r]->AllReduceSum(data[r].data(), 1001).ok());
          ddata[r] = {static_cast<double>(r), 0.5};
          ASSERT_TRUE(group[r]->AllReduceSum(ddata[r].data(), 2).ok());
        }
        std::vector<float> b(7, static_cast<float>(r));
        ASSERT_TRUE(group[r]->Broadcast(b.data(), 7, n - 1).ok());
        for (float x : b) ASSERT_EQ(x, static_cast<float>(n - 1));
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      for (int i = 0; i < 1001; ++i) {
        float want = 0;
        for (int q = 0; q < n; ++q) want += static_cast<float>(q * 1000 + i + 4);
        ASSERT_EQ(data[r][i], want) << "n=" << n << " rank " << r << " i " << i;
      }
      EXPECT_EQ(ddata[r][0], n * (n - 1) / 2.0);
      EXPECT_EQ(ddata[r][1], 0.5 * n);
    }
  }
}

TEST(RunInProcessGroupTest, EveryRankRunsOnItsOwnThreadAndSums) {
  for (int n : {1, 3}) {
    std::vector<double> got(n, 0);
    std::vector<std::thread::id> ids(n);
    absl::Status s = RunInProcessGroup(n, [&](Collective* c) {
      double x = c->rank() + 1;
      absl::Status r = c->AllReduceSum(&x, 1);
      got[c->rank()] = x;
      ids[c->rank()] = std::this_thread::get_id();
      return r;
    });
    ASSERT_TRUE(s.ok()) << s;
    for (int r = 0; r < n; ++r) EXPECT_EQ(got[r], n * (n + 1) / 2.0);
    EXPECT_EQ(ids[0], std::this_thread::get_id());  // rank 0 on the caller
    for (int r = 1; r < n; ++r) EXPECT_NE(ids[r], ids[0]);
  }
}

TEST(RunInProcessGroupTest, AFailedRankStopsTheOthersWaitingForIt) {
  std::vector<absl::Status> seen(3);
  absl::Status s = RunInProcessGroup(3, [&](Collective* c) {
    if (c->rank() == 1) return absl::NotFoundError("no data for rank 1");
    float x[4] = {1, 2, 3, 4};
    absl::Status r;
    for (int step = 0; step < 3 && r.ok(); ++step) r = c->AllReduceSum(x, 4);  // waits for rank 1
    seen[c->rank()] = r;
    return r;
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "rank 1: no data for rank 1");
  for (int r : {0, 2}) {
    EXPECT_EQ(seen[r].code(), absl::StatusCode::kAborted);
    EXPECT_TRUE(absl::StrContains(seen[r].message(), "rank 1 failed")) << seen[r];
  }
}

TEST(RunInProcessGroupTest, AFailureAfterSomeStepsStopsABroadcastToo) {
  std::atomic<int> completed{0};
  absl::Status s = RunInProcessGroup(2, [&](Collective* c) {
    std::vector<float> p(100, static_cast<float>(c->rank()));
    for (int step = 0; step < 1000; ++step) {
      if (c->rank() == 0 && step == 5) return absl::InternalError("disk full");
      absl::Status r = c->Broadcast(p.data(), 100, 0);
      if (!r.ok()) return r;
      ++completed;
    }
    return absl::OkStatus();
  });
  EXPECT_EQ(s.message(), "rank 0: disk full");
  EXPECT_EQ(completed.load(), 10);  // 5 broadcasts on each rank, then rank 1 stopped
}

TEST(RunInProcessGroupTest, ARankEndingEarlyIsAnErrorForThoseStillWaiting) {
  absl::Status s = RunInProcessGroup(2, [&](Collective* c) {
    if (c->rank() == 0) return absl::OkStatus();
    double x = 1;
    return c->AllReduceSum(&x, 1);
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(absl::StrContains(s.message(), "rank 1: rank 0 ended its run")) << s;
}

TEST(RunInProcessGroupTest, RanksThatEndTogetherSucceed) {
  for (int round = 0; round < 50; ++round) {
    absl::Status s = RunInProcessGroup(4, [&](Collective* c) {
      double x = 1;
      return c->AllReduceSum(&x, 1);
    });
    ASSERT_TRUE(s.ok()) << s;
  }
}

}  // namespace
}  // namespace tnmt::train
