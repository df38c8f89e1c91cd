// The host side of one decoder step over a KV cache (kv_index.h), written once for both
// devices: engine/layers/decoder.cc (DecoderForward, the CPU) and
// engine/cuda/cuda_step_model.cc (CudaStepModel::Step, the GPU) each plan a step here, then
// hand the plan to their ReorderSlotTables kernel and to DecodeStep (transformer.h) through a
// StepCache over their own pools.
//
// A plan covers `padded` rows: the index's live rows first, then padding rows (CUDA graph
// buckets; none on the CPU), which decode pad_id at position 0 against the first row's source
// and write their K/V to slots kept for padding (never freed, never returned). Every per-row
// array has the layout the ReorderSlotTables kernels read.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/graph/kv_index.h"
#include "engine/model/config.h"
#include "kernels/attention.h"

namespace tnmt::graph {

struct StepPlan {
  int rows = 0;         // live rows of the index
  int padded = 0;       // rows computed, >= rows
  int t_new = 1;        // new positions per row (> 1: teacher forcing, all rows at `start`)
  int start = 0;        // the first row's position before the step
  int furthest = 0;     // most keys a live row attends to after the step
  int src_longest = 0;  // longest source a live row attends to
  // Per row ([padded]): the position before the step, the source, the keys valid after the
  // step (position + t_new), the row of the current slot tables holding its ancestry (-1: a
  // new or padding row) and the slot of its first new position.
  std::vector<int32_t> pos, sources, valid, map, first_slot;
  // Per query row ([padded * t_new], row r's new positions at r * t_new ...): the position
  // and the self-attention slot its K/V is written to.
  std::vector<int32_t> positions, slots;
};

// Plans a step of t_new positions for every live row of `index` over `padded` rows: checks
// that each row stays within max_steps (and, for t_new > 1, that the rows share a position),
// reserves the self-attention slots through `grow_self`, takes padded - rows slots for padding
// into *pad_slots when it holds fewer (they stay there for later steps), and takes a slot for
// each new position of each live row, charged to the row's source. Errors leave the rows as
// they were (a pool may have grown).
absl::Status PlanStep(KvIndex& index, int t_new, int padded, int max_steps, const KvIndex::Grow& grow_self,
                      std::vector<int32_t>* pad_slots, StepPlan* plan);

// The step's self- and cross-attention arguments, every K/V addressed through slot tables
// (ld_kv = 0: one slot per stored group): self over `tables` ([padded, max_steps]) with
// `valid` keys, cross over the source tables (`src_lengths`, `src_slots` [sources,
// src_stride]) of each row's source (`sources`); the pointers in the device's memory. Bounded
// by the plan's furthest / src_longest, or with fixed_bounds by max_steps / src_stride, the
// same for every step (what a captured CUDA graph replays).
struct StepAttention {
  kernels::AttentionArgs self, cross;
};
StepAttention PlanAttention(const ModelConfig& c, const StepPlan& plan, int max_steps, const int32_t* tables,
                            const int32_t* valid, const int32_t* sources, const int32_t* src_lengths,
                            const int32_t* src_slots, int src_stride, bool fixed_bounds);

// DecodeStep's Cache (transformer.h) for one planned step over a device's pools. Pools has
// float* self_pool(size_t layer) and float* cross_pool(size_t layer); after_cross(layer, q,
// args) runs after each layer's cross-attention and returns a Status (alignments).
template <class Pools, class AfterCross>
class StepCache {
 public:
  StepCache(Pools& pools, const int32_t* new_slots, const StepAttention& args, AfterCross after_cross)
      : pools_(pools), new_slots_(new_slots), args_(args), after_cross_(after_cross) {}
  float* self_pool(size_t layer) { return pools_.self_pool(layer); }
  float* cross_pool(size_t layer) { return pools_.cross_pool(layer); }
  const int32_t* new_slots() const { return new_slots_; }
  const kernels::AttentionArgs& self_args() const { return args_.self; }
  const kernels::AttentionArgs& cross_args() const { return args_.cross; }
  absl::Status AfterCrossAttention(size_t layer, const float* q, const kernels::AttentionArgs& a) {
    return after_cross_(layer, q, a);
  }

 private:
  Pools& pools_;
  const int32_t* new_slots_;
  const StepAttention& args_;
  AfterCross after_cross_;
};

}  // namespace tnmt::graph
