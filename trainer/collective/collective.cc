// Single-process and in-process (threads) collectives; see collective.h.
#include "trainer/collective/collective.h"

#include <condition_variable>
#include <cstring>
#include <mutex>

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

// Shared state of an in-process group: a reusable barrier plus the participants' pointers.
struct Group {
  explicit Group(int n) : size(n), pointers(n, nullptr) {}
  void Barrier() {
    std::unique_lock<std::mutex> lock(mu);
    const int64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen; });
    }
  }
  const int size;
  std::vector<void*> pointers;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  int64_t generation = 0;
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
    g_->Barrier();
    if (rank_ != root) std::memcpy(data, g_->pointers[root], sizeof(float) * count);
    g_->Barrier();
    return absl::OkStatus();
  }

 private:
  // Each rank sums its own slice over all ranks (in rank order) into a local buffer, then,
  // after a barrier, writes it back to every rank, so no rank reads a value another rank has
  // already overwritten.
  template <typename T>
  absl::Status Reduce(T* data, int64_t count) {
    const int n = g_->size;
    g_->pointers[rank_] = data;
    g_->Barrier();
    const int64_t begin = count * rank_ / n, end = count * (rank_ + 1) / n;
    std::vector<T> sum(end - begin, T(0));
    for (int r = 0; r < n; ++r) {
      const T* src = static_cast<const T*>(g_->pointers[r]);
      for (int64_t i = begin; i < end; ++i) sum[i - begin] += src[i];
    }
    g_->Barrier();
    for (int r = 0; r < n; ++r) {
      std::memcpy(static_cast<T*>(g_->pointers[r]) + begin, sum.data(), sizeof(T) * (end - begin));
    }
    g_->Barrier();
    return absl::OkStatus();
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

}  // namespace tnmt::train
