// In-process collectives: all-reduce of floats and doubles and broadcast across 1-4 threads,
// identical results on every rank, repeated calls (barrier reuse), bad roots.
#include "trainer/collective/collective.h"

#include <thread>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tnmt::train
