// Scheduler admission: waiting requests take turns, so a large request cannot hold every free
// batch row while a small one waits behind it.
#include "server/scheduler.h"

#include <algorithm>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/runtime/loaded_model.h"
#include "engine/runtime/translator.h"

namespace tnmt::server {
namespace {

// The tiny test model and the pieces of "a b c" with </s>.
// Waits up to 60 s (a generous cap for a loaded machine) for `done`, polling every millisecond.
template <typename F>
bool WaitFor(F done) {
  const absl::Time until = absl::Now() + absl::Seconds(60);
  while (!done()) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

void LoadTiny(absl::StatusOr<std::shared_ptr<const LoadedModel>>* model, std::vector<int32_t>* source) {
  *model = LoadModelDirectory("tests/golden/data/tiny");
  ASSERT_TRUE(model->ok()) << model->status();
  auto ids = (**model)->tokenizer->Encode("a b c");
  ASSERT_TRUE(ids.ok());
  *source = *ids;
  source->push_back((**model)->config.eos_id);
}

TEST(SchedulerTest, RequestsTakeTurnsForFreeRows) {
  absl::StatusOr<std::shared_ptr<const LoadedModel>> model;
  std::vector<int32_t> source;
  LoadTiny(&model, &source);
  ASSERT_TRUE(model.ok()) << model.status();
  SchedulerOptions options;
  options.max_batch_rows = 2;  // two greedy sentences at a time
  std::mutex compute;
  std::mutex order_mu;
  std::vector<std::string> order;
  auto task = [&](const std::string& name) {
    SentenceTask t;
    t.ids = source;
    t.options = DecodeOptions::FromConfig((*model)->config);
    t.options.beam_size = 1;
    t.done = [&, name](SentenceResult r) {
      EXPECT_TRUE(r.status.ok()) << r.status;
      std::lock_guard<std::mutex> lock(order_mu);
      order.push_back(name);
    };
    return t;
  };
  {
    Scheduler scheduler("tiny", *model, options, nullptr, &compute);
    {
      // Holding the compute lock keeps the first admission (two of A's sentences) from
      // decoding until B has queued behind A's other four.
      std::lock_guard<std::mutex> hold(compute);
      std::vector<SentenceTask> a;
      for (int i = 0; i < 6; ++i) a.push_back(task("A" + std::to_string(i)));
      ASSERT_TRUE(scheduler.Enqueue(std::move(a)).ok());
      // The worker admits A0 and A1 (the two rows) and then waits for the compute lock.
      ASSERT_TRUE(WaitFor([&] { return scheduler.queue_length() == 4; })) << scheduler.queue_length();
      std::vector<SentenceTask> b;
      b.push_back(task("B"));
      ASSERT_TRUE(scheduler.Enqueue(std::move(b)).ok());
    }
    scheduler.Drain();
  }
  ASSERT_EQ(order.size(), 7u);
  // Identical sentences finish in admission order, two by two: A0 A1, then B with A2 (first-come
  // first-served would run A2..A5 first and finish B last).
  const auto b = std::find(order.begin(), order.end(), "B") - order.begin();
  EXPECT_LE(b, 3) << "B finished " << b + 1 << "th of 7";
}

TEST(SchedulerTest, LongDecodesLeaveReservedRowsForShortCalls) {
  absl::StatusOr<std::shared_ptr<const LoadedModel>> model;
  std::vector<int32_t> source;
  LoadTiny(&model, &source);
  ASSERT_TRUE(model.ok()) << model.status();
  SchedulerOptions options;
  options.max_batch_rows = 16;
  options.reserved_rows = 8;  // the last 8 rows: short work, or requests of at most 4 rows
  std::mutex compute;
  std::mutex order_mu;
  std::vector<std::string> order;
  // A and B: one sentence each, beam 8, forced to 300 tokens (8 x 300 row-steps, over
  // reserved_cost); C: one natural-length sentence with beam 4.
  auto task = [&](const std::string& name, int beam, int length) {
    SentenceTask t;
    t.ids = source;
    t.options = DecodeOptions::FromConfig((*model)->config);
    t.options.beam_size = beam;
    if (length > 0) t.options.min_length = t.options.max_length = length;
    t.done = [&, name](SentenceResult r) {
      EXPECT_TRUE(r.status.ok()) << r.status;
      std::lock_guard<std::mutex> lock(order_mu);
      order.push_back(name);
    };
    std::vector<SentenceTask> request;
    request.push_back(std::move(t));
    return request;
  };
  {
    Scheduler scheduler("tiny", *model, options, nullptr, &compute);
    {
      // The worker admits A alone and then waits for the compute lock while B and C queue.
      std::unique_lock<std::mutex> hold(compute);
      ASSERT_TRUE(scheduler.Enqueue(task("A", 8, 300)).ok());
      while (scheduler.queue_length() > 0) {
        hold.unlock();
        absl::SleepFor(absl::Milliseconds(1));
        hold.lock();
      }
      ASSERT_TRUE(scheduler.Enqueue(task("B", 8, 300)).ok());
      ASSERT_TRUE(scheduler.Enqueue(task("C", 4, 0)).ok());
    }
    scheduler.Drain();
  }
  // B would fit the 16 rows beside A, but only into the reserved ones, which its long decode
  // may not take: C gets them and finishes while A still decodes; B runs after A.
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order[0], "C") << order[0] << " " << order[1] << " " << order[2];
  EXPECT_EQ(order[2], "B") << order[0] << " " << order[1] << " " << order[2];
}

// Resident set size in MiB (/proc/self/statm).
double RssMiB() {
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return static_cast<double>(pages_resident) * 4096 / (1 << 20);
}

TEST(SchedulerTest, IdleSchedulerGivesBackWhatABigBatchGrew) {
  auto model = LoadModelDirectory("tests/golden/data/tiny");
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = (*model)->config;
  SchedulerOptions options;
  options.max_batch_tokens = 1 << 20;
  options.max_batch_rows = 1024;
  std::mutex compute;
  Scheduler scheduler("tiny", *model, options, nullptr, &compute);
  auto run = [&](int sentences, int length) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> piece(4, c.vocab_size - 1);
    std::vector<SentenceTask> tasks;
    std::mutex mu;
    std::condition_variable cv;
    int left = sentences;
    for (int i = 0; i < sentences; ++i) {
      SentenceTask t;
      for (int j = 0; j < length - 1; ++j) t.ids.push_back(piece(rng));
      t.ids.push_back(c.eos_id);
      t.options = DecodeOptions::FromConfig(c);
      t.done = [&](SentenceResult r) {
        EXPECT_TRUE(r.status.ok()) << r.status;
        std::lock_guard<std::mutex> lock(mu);
        if (--left == 0) cv.notify_all();
      };
      tasks.push_back(std::move(t));
    }
    ASSERT_TRUE(scheduler.Enqueue(std::move(tasks)).ok());
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return left == 0; });
  };
  run(1, 8);
  ASSERT_TRUE(WaitFor([&] { return scheduler.memory_releases() == 1; }));  // the first release
  const double before = RssMiB();
  run(100, 600);  // 60k source tokens in one batch: encoder scratch and cross-attention K/V
  const double busy = RssMiB();
  ASSERT_TRUE(WaitFor([&] { return scheduler.memory_releases() == 2; }));
  const double after = RssMiB();
  EXPECT_GT(busy, before + 50) << "the big batch should have grown the scheduler's memory";
  // Most of the growth returns; what stays (allocator arenas of the compute threads, page
  // rounding) depends on the machine and on what else runs, so it is bounded relative to it.
  EXPECT_LT(after - before, std::max(20.0, 0.15 * (busy - before)))
      << "RSS MiB: " << before << " before, " << busy << " right after, " << after << " after idling";
}

}  // namespace
}  // namespace tnmt::server
