// The bookkeeping of device timing (kernels/time_account.h), over any event API: a timed call
// records an event before and after the work it queues on a stream; nothing waits for the
// device until the window is taken (Take), which waits once, for the last event, and reads
// every pair's elapsed time and the gap before it. kernels/cuda/gpu_timeline.h instantiates it
// over CUDA events; the tests over a fake clock.
//
// Api: `Event` and `Stream` types and
//   absl::Status Create(Event*); void Destroy(Event); absl::Status Record(Event, Stream);
//   bool Capturing(Stream);  // work queued now is being captured into a graph
//   absl::Status Wait(Event); absl::Status Elapsed(float* ms, Event from, Event to);
//
// Invariants: events are pooled (created on first use, then reused window after window: no
// allocation per step once the pool has grown); nested timed calls count in the outermost only;
// calls queued while the stream is being captured are not timed (a replayed graph is timed as
// a whole by its caller); all timed work is on one stream, so consecutive pairs give the gaps
// between them, and a StepBoundary makes the next gap one between steps. When the pool is full
// the recorded pairs are read at once (one wait, counted as a flush) and the pool reused, the
// last end event kept for the next gap. Off, a timed call records nothing: one branch.
// One host thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/time_account.h"

namespace tnmt::kernels {

template <typename Api>
class TimedCalls {
 public:
  using Event = typename Api::Event;
  using Stream = typename Api::Stream;

  // Events the pool may hold (two per timed call) before a flush.
  static constexpr int kDefaultMaxEvents = 1 << 17;

  // Whether TNMT_GPU_TIMING asks for timing (set, and neither empty nor "0").
  static bool EnabledByEnvironment() {
    const char* v = std::getenv("TNMT_GPU_TIMING");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }

  explicit TimedCalls(Api api = Api(), int max_events = kDefaultMaxEvents)
      : api_(std::move(api)), max_events_(max_events < 4 ? 4 : max_events) {}
  ~TimedCalls() {
    for (Event e : events_) api_.Destroy(e);
  }
  TimedCalls(const TimedCalls&) = delete;
  TimedCalls& operator=(const TimedCalls&) = delete;

  bool enabled() const { return enabled_; }
  void set_enabled(bool on) { enabled_ = on; }

  // The next gap is between steps (TimeAccount::between_ms), not inside one.
  void StepBoundary() { boundary_ = true; }

  // Times the work queued on `stream` during its lifetime as category `c`.
  class Scope {
   public:
    Scope(TimedCalls& t, Stream stream, TimeCategory c) : t_(t), stream_(stream) {
      if (t.enabled_) {
        entered_ = true;
        t.Begin(stream, c);
      }
    }
    ~Scope() {
      if (entered_) t_.End(stream_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    TimedCalls& t_;
    Stream stream_;
    bool entered_ = false;
  };

  // The account so far (callers add host phases to it).
  TimeAccount& account() { return account_; }

  // Reads every recorded pair into the account (waits for the last event), returns the
  // account and starts a new window; the first error met while recording, if any. The
  // counters are running totals (cudaMalloc calls, GEMM plans built): the account gets their
  // increase since the previous Take. Not inside a Scope.
  absl::StatusOr<TimeAccount> Take(int64_t device_allocs = 0, int64_t gemm_plans = 0) {
    if (depth_ > 0) return absl::FailedPreconditionError("device timing: Take inside a timed call");
    error_.Update(Resolve(/*keep_last=*/false));
    boundary_ = false;
    account_.device_allocs += device_allocs - allocs_seen_;
    account_.gemm_plans_built += gemm_plans - plans_seen_;
    allocs_seen_ = device_allocs;
    plans_seen_ = gemm_plans;
    TimeAccount out = account_;
    account_.Clear();
    if (!error_.ok()) return std::exchange(error_, absl::OkStatus());
    return out;
  }

  int64_t events_created() const { return static_cast<int64_t>(events_.size()); }

 private:
  struct Record {
    TimeCategory category;
    int begin;      // events_[begin] and events_[begin + 1]
    bool boundary;  // a step boundary came before this call
  };

  // Adds the host time of its scope to `ms` (the timing's own cost).
  class HostCost {
   public:
    explicit HostCost(double* ms) : ms_(ms), start_(std::chrono::steady_clock::now()) {}
    ~HostCost() {
      *ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
    }

   private:
    double* ms_;
    std::chrono::steady_clock::time_point start_;
  };

  // events_[used_], creating it if the pool has not grown that far.
  bool NextEvent(int* index) {
    if (used_ == static_cast<int>(events_.size())) {
      Event e{};
      if (absl::Status s = api_.Create(&e); !s.ok()) {
        error_.Update(s);
        return false;
      }
      events_.push_back(e);
    }
    *index = used_++;
    return true;
  }

  void Begin(Stream stream, TimeCategory c) {
    if (depth_++ > 0) return;  // nested: the outermost call times it
    HostCost cost(&account_.timing_host_ms);
    open_recorded_ = false;
    if (api_.Capturing(stream)) return;
    if (used_ + 2 > max_events_) {
      ++account_.flushes;
      error_.Update(Resolve(/*keep_last=*/true));
    }
    const int mark = used_;
    int begin = 0, end = 0;
    if (!NextEvent(&begin) || !NextEvent(&end)) {
      used_ = mark;
      return;
    }
    if (absl::Status s = api_.Record(events_[begin], stream); !s.ok()) {
      error_.Update(s);
      used_ = mark;
      return;
    }
    records_.push_back({c, begin, boundary_});
    boundary_ = false;
    open_recorded_ = true;
  }

  void End(Stream stream) {
    if (--depth_ > 0 || !open_recorded_) return;
    HostCost cost(&account_.timing_host_ms);
    open_recorded_ = false;
    const int end = records_.back().begin + 1;
    if (absl::Status s = api_.Record(events_[end], stream); !s.ok()) {
      error_.Update(s);
      used_ = records_.back().begin;
      records_.pop_back();
      return;
    }
    last_end_ = end;
  }

  // Reads the recorded pairs into account_; with keep_last the last end event moves to slot 0
  // and starts the next gap.
  absl::Status Resolve(bool keep_last) {
    absl::Status status;
    if (!records_.empty()) {
      status = api_.Wait(events_[records_.back().begin + 1]);
      int prev = kept_end_ ? 0 : -1;
      for (const Record& r : records_) {
        if (!status.ok()) break;
        float ms = 0;
        status = api_.Elapsed(&ms, events_[r.begin], events_[r.begin + 1]);
        account_.AddWork(r.category, ms);
        if (prev >= 0 && status.ok()) {
          float gap = 0;
          status = api_.Elapsed(&gap, events_[prev], events_[r.begin]);
          if (r.boundary) {
            account_.between_ms += gap;
            ++account_.betweens;
          } else {
            account_.gap_ms += gap;
          }
        }
        prev = r.begin + 1;
      }
    }
    kept_end_ = keep_last && last_end_ >= 0 && status.ok();
    if (kept_end_) {
      std::swap(events_[0], events_[last_end_]);
      last_end_ = 0;
      used_ = 1;
    } else {
      last_end_ = -1;
      used_ = 0;
    }
    records_.clear();
    return status;
  }

  Api api_;
  const int max_events_;
  bool enabled_ = false;
  bool boundary_ = false;
  int depth_ = 0;               // open scopes (only the outermost records)
  bool open_recorded_ = false;  // the outermost open scope recorded its begin event
  std::vector<Event> events_;
  int used_ = 0;                // events_[0, used_) recorded in this window
  int last_end_ = -1;           // the previous call's end event, for the gap before the next
  bool kept_end_ = false;       // events_[0] is the end event kept from a flush
  std::vector<Record> records_;
  TimeAccount account_;
  absl::Status error_;
  int64_t allocs_seen_ = 0, plans_seen_ = 0;  // the counters at the previous Take
};

}  // namespace tnmt::kernels
