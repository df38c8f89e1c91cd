// ParallelFor: every index exactly once, also with concurrent and nested callers.
#include "kernels/cpu/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace tnmt::kernels::cpu {
namespace {

// Runs ParallelFor over n indices and checks that each was visited exactly once.
void ExpectEachIndexOnce(int64_t n) {
  std::vector<std::atomic<int>> seen(n);
  for (auto& s : seen) s = 0;
  ParallelFor(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) seen[i]++;
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << "n=" << n << " i=" << i;
}

TEST(ParallelFor, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    SetComputeThreads(threads);
    for (int64_t n : {0, 1, 2, 3, 7, 100}) ExpectEachIndexOnce(n);
  }
  SetComputeThreads(1);
}

// Whoever runs a chunk (the caller takes every chunk no worker has claimed yet), the chunks
// are always [n * c / parts, n * (c + 1) / parts): the split never depends on the timing.
TEST(ParallelFor, ChunksAreTheFixedSplit) {
  for (int threads : {2, 3}) {
    SetComputeThreads(threads);
    for (int rep = 0; rep < 200; ++rep) {
      for (int64_t n : {2, 5, 64}) {
        std::mutex mu;
        std::set<std::pair<int64_t, int64_t>> chunks;
        ParallelFor(n, [&](int64_t begin, int64_t end) {
          std::lock_guard<std::mutex> lock(mu);
          chunks.insert({begin, end});
        });
        const int64_t parts = std::min<int64_t>(threads, n);
        std::set<std::pair<int64_t, int64_t>> want;
        for (int64_t c = 0; c < parts; ++c) want.insert({n * c / parts, n * (c + 1) / parts});
        ASSERT_EQ(chunks, want) << "n=" << n << " threads=" << threads;
      }
    }
  }
  SetComputeThreads(1);
}

TEST(ParallelFor, ConcurrentCallersFromSeveralThreads) {
  // Two decoding threads (e.g. two models served at once) may call it at the same time.
  SetComputeThreads(2);
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([] {
      for (int rep = 0; rep < 300; ++rep) ExpectEachIndexOnce(37);
    });
  }
  for (auto& c : callers) c.join();
  SetComputeThreads(1);
}

TEST(ParallelFor, NestedCallRunsInline) {
  SetComputeThreads(2);
  std::atomic<int64_t> total{0};
  ParallelFor(4, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      ParallelFor(10, [&](int64_t b, int64_t e) { total += e - b; });
    }
  });
  EXPECT_EQ(total.load(), 40);
  SetComputeThreads(1);
}

}  // namespace
}  // namespace tnmt::kernels::cpu
