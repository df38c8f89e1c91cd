// File collective: double sums and broadcasts across 1-4 threads and across forked processes equal
// the rank-order sum bit for bit; float sums are refused; only the last operation's files
// remain; a peer that never arrives is a timeout naming it; mismatched calls are named; stale
// directories are refused.
#include "trainer/launch/file_collective.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <thread>

#include <gtest/gtest.h>

namespace tnmt::train {
namespace {

std::string FreshDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/filecoll-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

int CountFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  int n = 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

// Data of rank r in round k: random doubles with rounding in their sums.
std::vector<double> DoubleData(int r, int k, int count) {
  std::mt19937 rng(1000 * r + k);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(count);
  for (double& x : v) x = u(rng) * (1 + r);
  return v;
}

// Runs `rounds` rounds of sums and broadcasts on one rank and checks every result; returns the
// number of wrong values (0 when all are right).
int RunRank(Collective* c, int n, int rounds, int count) {
  int wrong = 0;
  const int r = c->rank();
  for (int k = 0; k < rounds; ++k) {
    std::vector<double> x = DoubleData(r, k, count);
    if (!c->AllReduceSum(x.data(), count).ok()) return -1;
    std::vector<double> want(count, 0.0);
    for (int q = 0; q < n; ++q) {
      const std::vector<double> xq = DoubleData(q, k, count);
      for (int i = 0; i < count; ++i) want[i] += xq[i];
    }
    for (int i = 0; i < count; ++i) wrong += x[i] != want[i];
    std::vector<float> b(5, static_cast<float>(r) + 0.5f);
    const int root = k % n;
    if (!c->Broadcast(b.data(), 5, root).ok()) return -1;
    for (float v : b) wrong += v != static_cast<float>(root) + 0.5f;
    if (!c->AllReduceSum(x.data(), 0).ok()) return -1;  // empty operations work too
    wrong += c->AllReduceSum(b.data(), 5).code() != absl::StatusCode::kFailedPrecondition;  // no file written
  }
  return wrong;
}

TEST(FileCollectiveTest, ThreadsSumInRankOrderAndBroadcast) {
  for (int n : {1, 2, 3, 4}) {
    const std::string dir = FreshDir();
    std::vector<std::unique_ptr<Collective>> ranks;
    for (int r = 0; r < n; ++r) {
      auto c = MakeFileCollective(dir, r, n);
      ASSERT_TRUE(c.ok()) << c.status();
      ranks.push_back(*std::move(c));
    }
    std::vector<int> wrong(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { wrong[r] = RunRank(ranks[r].get(), n, 6, 777); });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) EXPECT_EQ(wrong[r], 0) << "n=" << n << " rank " << r;
    EXPECT_EQ(CountFiles(dir), n) << "only the last operation's file of each rank remains";
  }
}

TEST(FileCollectiveTest, ForkedProcesses) {
  const int n = 3;
  const std::string dir = FreshDir();
  std::vector<pid_t> children;
  for (int r = 1; r < n; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto c = MakeFileCollective(dir, r, n);
      ::_exit(c.ok() && RunRank(c->get(), n, 4, 4099) == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  auto c = MakeFileCollective(dir, 0, n);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(RunRank(c->get(), n, 4, 4099), 0);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a forked rank got a wrong result";
  }
}

TEST(FileCollectiveTest, MissingPeerTimesOutNamingIt) {
  const std::string dir = FreshDir();
  std::vector<absl::Status> got(3);
  std::vector<std::thread> threads;
  for (int r : {0, 2}) {
    threads.emplace_back([&, r] {
      auto c = MakeFileCollective(dir, r, 3, absl::Milliseconds(300));
      ASSERT_TRUE(c.ok());
      double x = 1;
      got[r] = (*c)->AllReduceSum(&x, 1);
    });
  }
  const auto start = std::chrono::steady_clock::now();
  for (auto& t : threads) t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  for (int r : {0, 2}) {
    EXPECT_EQ(got[r].code(), absl::StatusCode::kDeadlineExceeded) << got[r];
    EXPECT_NE(got[r].message().find("rank 1 did not arrive at operation 1"), std::string::npos) << got[r];
  }
}

TEST(FileCollectiveTest, MismatchedCallsAreNamed) {
  const std::string dir = FreshDir();
  absl::Status s0, s1;
  std::thread t0([&] {
    auto c = MakeFileCollective(dir, 0, 2);
    float x[3] = {1, 2, 3};
    s0 = (*c)->Broadcast(x, 3, 1);
  });
  std::thread t1([&] {
    auto c = MakeFileCollective(dir, 1, 2);
    double x[3] = {1, 2, 3};
    s1 = (*c)->AllReduceSum(x, 3);
  });
  t0.join();
  t1.join();
  EXPECT_EQ(s0.code(), absl::StatusCode::kFailedPrecondition) << s0;
  EXPECT_NE(s0.message().find("rank 1 called AllReduceSum(double) of 3 elements but rank 0 called "
                              "Broadcast(float) of 3 elements from root 1"),
            std::string::npos)
      << s0;
  EXPECT_FALSE(s1.ok());
}

TEST(FileCollectiveTest, StaleDirectoryAndBadArguments) {
  const std::string dir = FreshDir();
  {
    auto c = MakeFileCollective(dir, 0, 1);
    ASSERT_TRUE(c.ok());
    double x = 1;
    ASSERT_TRUE((*c)->AllReduceSum(&x, 1).ok());
    EXPECT_EQ(x, 1.0);
    float f = 1;
    EXPECT_FALSE((*c)->Broadcast(&f, 1, 1).ok());
  }
  auto again = MakeFileCollective(dir, 0, 1);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("already holds files of rank 0"), std::string::npos);
  EXPECT_FALSE(MakeFileCollective(dir, 2, 2).ok());
  EXPECT_FALSE(MakeFileCollective(dir + "/missing", 0, 1).ok());
}

}  // namespace
}  // namespace tnmt::train
