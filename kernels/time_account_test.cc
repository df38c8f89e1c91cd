// TimeAccount's sums and the table's arithmetic: every row per step, the rows adding up to the
// wall, empty categories left out, host phases by name.
#include "kernels/time_account.h"

#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace tnmt::kernels {
namespace {

// The numbers of the table row that starts with `label` (after the indent).
std::vector<double> Row(const std::string& table, const std::string& label) {
  std::istringstream in(table);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("  " + label, 0) != 0) continue;
    std::istringstream fields(line.substr(2 + label.size()));
    std::vector<double> v;
    std::string f;
    while (fields >> f) {
      try {
        v.push_back(std::stod(f));
      } catch (...) {
      }
    }
    return v;
  }
  return {};
}

TEST(TimeAccount, NamesAreDistinct) {
  for (int i = 0; i < kNumTimeCategories; ++i) {
    for (int j = i + 1; j < kNumTimeCategories; ++j) {
      EXPECT_STRNE(TimeCategoryName(static_cast<TimeCategory>(i)), TimeCategoryName(static_cast<TimeCategory>(j)));
    }
  }
  EXPECT_STREQ(TimeCategoryName(TimeCategory::kAttentionBackward), "attention_bwd");
}

TEST(TimeAccount, SumsAndMerge) {
  TimeAccount a;
  EXPECT_TRUE(a.empty());
  a.AddWork(TimeCategory::kGemm, 2.0);
  a.AddWork(TimeCategory::kGemm, 3.0, 2);
  a.AddWork(TimeCategory::kLoss, 1.0);
  a.gap_ms = 0.5;
  a.between_ms = 1.5;
  a.AddHost("beam search", 4.0);
  a.AddHost("beam search", 1.0);
  a.AddHost("setup", 2.0);
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a.Calls(), 4);
  EXPECT_DOUBLE_EQ(a.WorkMs(), 6.0);
  EXPECT_DOUBLE_EQ(a.SpanMs(), 8.0);
  ASSERT_EQ(a.host.size(), 2u);
  EXPECT_EQ(a.host[0].name, "beam search");
  EXPECT_DOUBLE_EQ(a.host[0].ms, 5.0);

  TimeAccount b;
  b.AddWork(TimeCategory::kGemm, 1.0);
  b.AddHost("setup", 1.0);
  b.AddHost("wait", 3.0);
  b.device_allocs = 2;
  b.gemm_plans_built = 3;
  b.flushes = 1;
  b.timing_host_ms = 0.25;
  b.betweens = 4;
  a.Merge(b);
  EXPECT_DOUBLE_EQ(a.work[static_cast<int>(TimeCategory::kGemm)].ms, 6.0);
  EXPECT_EQ(a.work[static_cast<int>(TimeCategory::kGemm)].calls, 4);
  ASSERT_EQ(a.host.size(), 3u);
  EXPECT_DOUBLE_EQ(a.host[1].ms, 3.0);
  EXPECT_EQ(a.host[2].name, "wait");
  EXPECT_EQ(a.device_allocs, 2);
  EXPECT_EQ(a.gemm_plans_built, 3);
  EXPECT_EQ(a.flushes, 1);
  EXPECT_DOUBLE_EQ(a.timing_host_ms, 0.25);
  EXPECT_EQ(a.betweens, 4);

  a.Clear();
  EXPECT_TRUE(a.empty());
  EXPECT_DOUBLE_EQ(a.SpanMs(), 0.0);
  ASSERT_EQ(a.host.size(), 3u);  // names kept, in order
  EXPECT_DOUBLE_EQ(a.host[0].ms, 0.0);
  EXPECT_EQ(a.device_allocs, 0);
}

TEST(TimeAccount, TableRowsAddUpToTheWall) {
  TimeAccount a;
  a.AddWork(TimeCategory::kGemm, 40.0, 100);
  a.AddWork(TimeCategory::kAttentionForward, 10.0, 20);
  a.AddWork(TimeCategory::kTopK, 6.0, 10);
  a.gap_ms = 4.0;
  a.between_ms = 20.0;
  a.betweens = 9;
  a.AddHost("beam search", 12.0);
  a.device_allocs = 1;
  a.gemm_plans_built = 7;
  a.timing_host_ms = 3.0;
  TimeWindow w;
  w.steps = 10;
  w.wall_ms = 100.0;
  w.step = "decode step";
  w.between = "between steps";
  const std::string t = FormatTimeTable(a, w);
  SCOPED_TRACE(t);
  EXPECT_NE(t.find("10 decode steps, 10.000 ms wall each"), std::string::npos);
  // Per step: ms, % of wall, calls per step, us per call.
  EXPECT_EQ(Row(t, "gemm"), (std::vector<double>{4.0, 40.0, 10.0, 400.0}));
  EXPECT_EQ(Row(t, "attention_fwd"), (std::vector<double>{1.0, 10.0, 2.0, 500.0}));
  EXPECT_EQ(Row(t, "topk"), (std::vector<double>{0.6, 6.0, 1.0, 600.0}));
  EXPECT_TRUE(Row(t, "loss").empty());  // no calls, no row
  // Largest first.
  EXPECT_LT(t.find("  gemm"), t.find("  attention_fwd"));
  EXPECT_LT(t.find("  attention_fwd"), t.find("  topk"));
  const double work = Row(t, "= device work")[0], gaps = Row(t, "+ gaps inside steps")[0],
               between = Row(t, "+ gaps between steps")[0], outside = Row(t, "+ outside the device span")[0],
               wall = Row(t, "= wall")[0];
  EXPECT_DOUBLE_EQ(work, 5.6);
  EXPECT_DOUBLE_EQ(gaps, 0.4);
  EXPECT_DOUBLE_EQ(between, 2.0);
  EXPECT_DOUBLE_EQ(outside, 2.0);
  EXPECT_DOUBLE_EQ(wall, 10.0);
  EXPECT_NEAR(work + gaps + between + outside, wall, 1e-9);
  EXPECT_NE(t.find("(9 gaps)"), std::string::npos);
  EXPECT_NE(t.find("host, ms/step: beam search 1.200\n"), std::string::npos);
  EXPECT_NE(t.find("counters: 1 cudaMalloc calls, 7 GEMM plans built, 0 timing flushes; recording the events "
                   "took 0.300 ms/step of host time\n"),
            std::string::npos);
}

TEST(TimeAccount, TableOfAnEmptyWindow) {
  const std::string t = FormatTimeTable(TimeAccount{}, TimeWindow{});
  EXPECT_NE(t.find("0 steps, 0.000 ms wall each"), std::string::npos);
  EXPECT_EQ(Row(t, "= device work")[0], 0.0);
  EXPECT_EQ(t.find("host,"), std::string::npos);
  EXPECT_EQ(t.back(), '\n');
}

}  // namespace
}  // namespace tnmt::kernels
