// Compute thread pool; see parallel.h.
#include "kernels/cpu/parallel.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tnmt::kernels::cpu {

namespace {

// How long a thread polls before it sleeps on a condition variable: a worker after its chunk
// (for the next call), the caller for the workers' chunks. A decoder step makes dozens of calls
// with short serial stretches between them; waking a sleeping thread costs a futex call on each
// side plus the scheduler's latency, often longer than the chunk itself, and a chunk the
// worker is too late for runs serially on the caller. Polling a little longer than those
// stretches keeps the workers awake through a step; after it they sleep, so an idle pool takes
// no CPU from other threads (OpenBLAS's, a server's) for long.
constexpr std::chrono::microseconds kSpin(50);

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls `done` until it returns true or kSpin has passed; returns its last value.
template <typename Done>
bool SpinUntil(Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      if (done()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

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
    bool wake;
    {
      std::unique_lock<std::mutex> lock(mu_);
      fn_ = &fn;
      n_ = n;
      parts_ = parts;
      next_ = 1;
      pending_.store(parts - 1, std::memory_order_relaxed);
      generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
      wake = sleepers_ > 0;  // polling workers see generation_ without a wake-up
    }
    if (wake) cv_.notify_all();
    fn(0, n / parts);  // the caller takes chunk 0
    // Then every chunk no worker has claimed yet: on a busy machine (a server's other threads,
    // a load generator) a worker may not be running when it is woken, and the call must not
    // wait for the scheduler to get to it. The chunks are the same whoever runs them.
    std::unique_lock<std::mutex> lock(mu_);
    RunClaimed(lock);
    if (pending_.load(std::memory_order_acquire) != 0) {
      lock.unlock();
      SpinUntil([&] { return pending_.load(std::memory_order_acquire) == 0; });
      lock.lock();
      caller_waiting_ = true;
      done_cv_.wait(lock, [&] { return pending_.load(std::memory_order_relaxed) == 0; });
      caller_waiting_ = false;
    }
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
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1 && caller_waiting_) {
        done_cv_.notify_one();
      }
    }
  }

  void Work() {
    int64_t seen = 0;
    for (;;) {
      SpinUntil([&] { return generation_.load(std::memory_order_acquire) != seen; });
      std::unique_lock<std::mutex> lock(mu_);
      if (generation_.load(std::memory_order_relaxed) == seen) {
        ++sleepers_;
        cv_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
        --sleepers_;
      }
      seen = generation_.load(std::memory_order_relaxed);
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
  // Written under mu_; the atomics are also polled without it.
  int next_ = 0;                  // the next chunk to claim, in [1, parts_]
  std::atomic<int> pending_{0};   // chunks 1.. of the current call not yet finished
  std::atomic<int64_t> generation_{0};
  int sleepers_ = 0;              // workers waiting on cv_
  bool caller_waiting_ = false;   // the caller waits on done_cv_
};

}  // namespace

void SetComputeThreads(int threads) { Pool::Get().Resize(threads); }
int ComputeThreads() { return Pool::Get().threads(); }

void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) { Pool::Get().Run(n, fn); }

void ParallelForLarge(int64_t n, int64_t work_per_index, const std::function<void(int64_t, int64_t)>& fn) {
  constexpr int64_t kMinParallelWork = int64_t{1} << 15;
  if (n * work_per_index >= kMinParallelWork) {
    ParallelFor(n, fn);
  } else if (n > 0) {
    fn(0, n);
  }
}

}  // namespace tnmt::kernels::cpu
