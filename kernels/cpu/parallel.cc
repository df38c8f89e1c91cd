// Compute thread pool; see parallel.h.
#include "kernels/cpu/parallel.h"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace tnmt::kernels::cpu {

namespace {

class Pool {
 public:
  static Pool& Get() {
    static Pool* pool = new Pool();  // never destroyed: workers may outlive static teardown
    return *pool;
  }

  void Resize(int threads) {
    std::unique_lock<std::mutex> lock(mu_);
    target_ = threads < 1 ? 1 : threads;
    while (static_cast<int>(workers_.size()) < target_ - 1) {
      workers_.emplace_back([this] { Work(); });
      workers_.back().detach();
    }
  }
  int threads() const { return target_; }

  void Run(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    const int parts = static_cast<int>(std::min<int64_t>(target_, n));
    // One call at a time owns the workers; a call made meanwhile (another thread decoding, or
    // a nested call) runs inline on its own thread instead of waiting or oversubscribing.
    std::unique_lock<std::mutex> owner(run_mu_, std::defer_lock);
    if (parts <= 1 || !owner.try_lock()) {
      fn(0, n);
      return;
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      fn_ = &fn;
      n_ = n;
      parts_ = parts;
      next_ = 1;
      pending_ = parts - 1;
      ++generation_;
    }
    cv_.notify_all();
    fn(0, n / parts);  // the caller takes chunk 0
    // Then every chunk no worker has claimed yet: on a busy machine (a server's other threads,
    // a load generator) a worker may not be running when it is woken, and the call must not
    // wait for the scheduler to get to it. The chunks are the same whoever runs them.
    std::unique_lock<std::mutex> lock(mu_);
    RunClaimed(lock);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    fn_ = nullptr;
  }

 private:
  // Claims and runs chunks of the current call until none is left; `lock` holds mu_ (released
  // while a chunk runs). A chunk's function, size and split are read with its claim, so a
  // worker that wakes late takes chunks of whichever call is current, or none.
  void RunClaimed(std::unique_lock<std::mutex>& lock) {
    while (next_ < parts_) {
      const int c = next_++;
      const std::function<void(int64_t, int64_t)>* fn = fn_;
      const int64_t n = n_;
      const int parts = parts_;
      lock.unlock();
      (*fn)(n * c / parts, n * (c + 1) / parts);
      lock.lock();
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  void Work() {
    int64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      RunClaimed(lock);
    }
  }

  std::mutex run_mu_;  // held by the call that uses the workers
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  int target_ = 1;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int parts_ = 0;
  int next_ = 0;     // the next chunk to claim, in [1, parts_]
  int pending_ = 0;  // chunks 1.. of the current call not yet finished
  int64_t generation_ = 0;
};

}  // namespace

void SetComputeThreads(int threads) { Pool::Get().Resize(threads); }
int ComputeThreads() { return Pool::Get().threads(); }

void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) { Pool::Get().Run(n, fn); }

}  // namespace tnmt::kernels::cpu
