// Where a device's time went: named categories of device work, the device's gaps between timed
// calls, named host phases and a few counters, summed over a window of steps (training updates
// or decode steps), and the "where every millisecond went" table made of them. Plain C++: the
// CUDA side (kernels/cuda/gpu_timeline.h) measures with device events and fills a TimeAccount;
// programs add their host phases and format it.
//
// The table splits the window's wall time without remainder:
//   wall = device work (sum of the categories)
//        + gaps inside steps   (device idle, or work outside any timed call)
//        + gaps between steps  (from one step's last timed call to the next step's first)
//        + outside the span    (wall minus the device span: host time before the window's
//                               first timed call and after its last)
// where the device span is the time from the window's first timed call to its last, which is
// work + gaps because the timed calls of one stream follow each other.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tnmt::kernels {

enum class TimeCategory : uint8_t {
  kGemm,              // cuBLASLt GEMMs
  kConvert,           // float32 -> float16/bfloat16 copies of GEMM inputs
  kAttentionForward,  // attention (training forward, decode step, encoder)
  kAttentionBackward,
  kLayerNormForward,
  kLayerNormBackward,
  kBiasGrad,          // bias gradients (column sums) and their zeroing
  kDropoutResidual,   // dropout, residual adds, activations and their backward
  kEmbeddingForward,  // token embedding and positions
  kEmbeddingBackward,
  kLoss,              // label-smoothed loss and its gradient, R-Drop, loss scaling
  kOptimizer,         // Adam, gradient norm, half-precision weight refresh
  kAllReduce,         // gradient and loss-total reductions
  kTopK,              // decode: log-sum-exp, eos logit and top-k of the logits
  kCopy,              // host<->device copies (the decode step's copy back), memsets, scatters
  kGraph,             // a whole decode step replayed as a CUDA graph (not split further)
  kOther,             // anything else timed (slot tables, ...)
};
inline constexpr int kNumTimeCategories = static_cast<int>(TimeCategory::kOther) + 1;

// Short snake_case name, e.g. "attention_bwd" (table rows and metrics keys).
const char* TimeCategoryName(TimeCategory c);

struct CategoryTime {
  double ms = 0;       // device milliseconds
  int64_t calls = 0;   // timed calls (one call may launch several kernels)
};

struct HostPhase {
  std::string name;
  double ms = 0;
};

struct TimeAccount {
  std::array<CategoryTime, kNumTimeCategories> work{};
  double gap_ms = 0;       // device time between timed calls of one step
  double between_ms = 0;   // device time between the last timed call of a step and the next's first
  int64_t betweens = 0;    // how many such gaps were measured
  std::vector<HostPhase> host;  // named host phases, in the order first added
  int64_t device_allocs = 0;    // cudaMalloc calls (the caching allocator's misses)
  int64_t gemm_plans_built = 0;  // GEMM plan-cache misses (cuBLASLt heuristic queries)
  int64_t flushes = 0;           // waits for the device inside the window (event pool full)
  double timing_host_ms = 0;     // host time spent recording the events (the timing's own cost)

  void AddWork(TimeCategory c, double ms, int64_t calls = 1) {
    CategoryTime& t = work[static_cast<int>(c)];
    t.ms += ms;
    t.calls += calls;
  }
  // Adds to the host phase `name` (created on first use; no allocation afterwards).
  void AddHost(std::string_view name, double ms);
  // Adds every field of `o` (host phases by name).
  void Merge(const TimeAccount& o);
  // Zeroes every number; keeps the host phases' names (and so their order).
  void Clear();

  double WorkMs() const;
  double SpanMs() const { return WorkMs() + gap_ms + between_ms; }
  int64_t Calls() const;
  bool empty() const { return Calls() == 0; }
};

// What the table is normalised by.
struct TimeWindow {
  int64_t steps = 0;     // steps (updates, decode steps) in the window
  double wall_ms = 0;    // host wall time of the window
  std::string step = "step";  // what one step is called, e.g. "update"
  std::string between = "between steps";  // what the gaps between steps hold
};

// The table, one row per category with work (ms per step, % of wall, calls per step, us per
// call), then the gaps, the remainder outside the span, the wall, the host phases (ms per step)
// and the counters. Lines end with '\n'.
std::string FormatTimeTable(const TimeAccount& a, const TimeWindow& w);

}  // namespace tnmt::kernels
