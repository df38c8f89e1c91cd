// Single-process and in-process (threads) collectives; see collective.h.
#include "trainer/collective/collective.h"

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"

namespace tnmt::train {

namespace {

class SingleProcess : public Collective {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  absl::Status AllReduceSum(float*, int64_t) override { return absl::OkStatus(); }
  absl::Status AllReduceSum(double*, int64_t) override { return absl::OkStatus(); }
  absl::Status Broadcast(float*, int64_t, int root) override {
    return root == 0 ? absl::OkStatus() : absl::InvalidArgumentError("broadcast root out of range");
  }
};

// Shared state of an in-process group: a reusable barrier plus the participants' pointers, and
// whether a rank has closed the group (see RunInProcessGroup).
struct Group {
  explicit Group(int n) : size(n), pointers(n, nullptr) {}

  // Waits for every rank. A barrier that every rank reached completes even if the group closes
  // meanwhile; one still missing a rank fails once the group is closed.
  absl::Status Barrier(int rank) {
    std::unique_lock<std::mutex> lock(mu);
    if (closed_by.has_value()) return Closed(rank);
    const int64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return absl::OkStatus();
    }
    cv.wait(lock, [&] { return generation != gen || closed_by.has_value(); });
    return generation != gen ? absl::OkStatus() : Closed(rank);
  }

  // Rank `rank` has left: no barrier it is missing from can complete any more.
  void Close(int rank, bool failed) {
    std::lock_guard<std::mutex> lock(mu);
    if (closed_by.has_value()) return;
    closed_by = rank;
    closer_failed = failed;
    cv.notify_all();
  }

  absl::Status Closed(int rank) const {  // mu held
    return absl::AbortedError(absl::StrCat("rank ", *closed_by, closer_failed ? " failed" : " ended its run",
                                           " while rank ", rank, " was in a collective operation"));
  }

  const int size;
  std::vector<void*> pointers;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  int64_t generation = 0;
  std::optional<int> closed_by;
  bool closer_failed = false;
};

class InProcess : public Collective {
 public:
  InProcess(std::shared_ptr<Group> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return g_->size; }
  absl::Status AllReduceSum(float* data, int64_t count) override { return Reduce(data, count); }
  absl::Status AllReduceSum(double* data, int64_t count) override { return Reduce(data, count); }
  absl::Status Broadcast(float* data, int64_t count, int root) override {
    if (root < 0 || root >= g_->size) return absl::InvalidArgumentError("broadcast root out of range");
    g_->pointers[rank_] = data;
    if (absl::Status s = g_->Barrier(rank_); !s.ok()) return s;
    if (rank_ != root) std::memcpy(data, g_->pointers[root], sizeof(float) * count);
    return g_->Barrier(rank_);
  }
  Group* group() const { return g_.get(); }

 private:
  // Each rank sums its own slice over all ranks (in rank order) into a local buffer, then,
  // after a barrier, writes it back to every rank, so no rank reads a value another rank has
  // already overwritten. Once every rank has passed the first barrier none can close the group
  // before the operation ends, so an operation is either complete or has changed no data.
  template <typename T>
  absl::Status Reduce(T* data, int64_t count) {
    const int n = g_->size;
    g_->pointers[rank_] = data;
    if (absl::Status s = g_->Barrier(rank_); !s.ok()) return s;
    const int64_t begin = count * rank_ / n, end = count * (rank_ + 1) / n;
    std::vector<T> sum(end - begin, T(0));
    for (int r = 0; r < n; ++r) {
      const T* src = static_cast<const T*>(g_->pointers[r]);
      for (int64_t i = begin; i < end; ++i) sum[i - begin] += src[i];
    }
    if (absl::Status s = g_->Barrier(rank_); !s.ok()) return s;
    for (int r = 0; r < n; ++r) {
      std::memcpy(static_cast<T*>(g_->pointers[r]) + begin, sum.data(), sizeof(T) * (end - begin));
    }
    return g_->Barrier(rank_);
  }

  std::shared_ptr<Group> g_;
  const int rank_;
};

}  // namespace

std::unique_ptr<Collective> MakeSingleProcessCollective() { return std::make_unique<SingleProcess>(); }

std::vector<std::unique_ptr<Collective>> MakeInProcessGroup(int n) {
  auto g = std::make_shared<Group>(n);
  std::vector<std::unique_ptr<Collective>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<InProcess>(g, r));
  return out;
}

absl::Status RunInProcessGroup(int n, const std::function<absl::Status(Collective*)>& rank_fn) {
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("RunInProcessGroup: ", n, " ranks"));
  std::vector<std::unique_ptr<Collective>> ranks = MakeInProcessGroup(n);
  Group* group = static_cast<InProcess*>(ranks[0].get())->group();
  std::vector<absl::Status> status(n);
  auto run = [&](int r) {
    status[r] = rank_fn(ranks[r].get());
    group->Close(r, !status[r].ok());
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) threads.emplace_back(run, r);
  run(0);
  for (std::thread& t : threads) t.join();
  int failed = -1;
  if (!status[*group->closed_by].ok()) failed = *group->closed_by;
  for (int r = 0; r < n && failed < 0; ++r) {
    if (!status[r].ok()) failed = r;
  }
  if (failed < 0) return absl::OkStatus();
  return absl::Status(status[failed].code(), absl::StrCat("rank ", failed, ": ", status[failed].message()));
}

}  // namespace tnmt::train
