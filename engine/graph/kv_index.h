// KvIndex: the host-side bookkeeping of a KV cache, shared by the CPU decoder
// (engine/layers/decoder.h DecoderState) and the CUDA step model (engine/cuda/cuda_step_model.h),
// which each keep only the storage: the K/V pools and the rows' slot tables.
//
// K/V live in two pools of slots (one slot = one position's K and V in every decoder layer):
// the cross-attention pool holds source positions, the self-attention pool decoded positions.
// Pools grow on demand keeping slot ids; free slots form a stack (lowest ids first). Slots
// belong to the source whose rows wrote them and are freed together when that source is
// released, so sentences can join and leave a running decode between steps.
//
// Rows: each hypothesis row attends to one source, has a position (positions decoded so far)
// and a `map`, the row of the device's current slot tables that holds its ancestry (-1: a new
// row, nothing decoded). Reorder only composes maps; the next step gathers the tables by map
// (kernels ReorderSlotTables), then the device calls TablesGathered(). So Reorder, Release and
// rows() never touch the device.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tnmt::graph {

class KvIndex {
 public:
  enum PoolId { kSelf = 0, kCross = 1 };
  // Grows a pool's storage from `old_capacity` to `new_capacity` slots, keeping slots
  // [0, old_capacity); an error leaves the storage as it was.
  using Grow = std::function<absl::Status(int old_capacity, int new_capacity)>;

  // `what` names the cache in errors ("DecoderState", "CudaStepModel").
  explicit KvIndex(const char* what = "KV cache") : what_(what) {}

  // Makes `more` slots free in `pool`, growing it (by doubling, at least 64) through `grow`.
  absl::Status Reserve(PoolId pool, int64_t more, const Grow& grow);
  // Takes a free slot (Reserve made room).
  int32_t TakeSlot(PoolId pool);
  int capacity(PoolId pool) const { return pools_[pool].capacity; }
  int64_t free_slots(PoolId pool) const { return static_cast<int64_t>(pools_[pool].free.size()); }

  // Sources. The positions of `batch` sources (the cross slots they need), after checking
  // 1 <= lengths[b] <= src_max.
  static absl::StatusOr<int64_t> SourcePositions(const int32_t* lengths, int batch, int src_max);
  // Takes cross slots for every source position (Reserve(kCross, SourcePositions(...)) first)
  // and returns the sources' ids.
  absl::StatusOr<std::vector<int32_t>> AddSources(const int32_t* lengths, int batch, int src_max);
  // Frees a source's slots and id (which a later AddSources may reuse); no row may attend to it.
  absl::Status ReleaseSource(int32_t source);
  // As ReleaseSource without the row check (undoing an AddSources that failed later).
  void Forget(int32_t source);
  bool live(int32_t source) const {
    return source >= 0 && source < static_cast<int32_t>(sources_.size()) && sources_[source].live;
  }
  int live_sources() const { return live_sources_; }
  // [sources, src_stride()]: the cross slot of each source position; src_lengths()[s]: the
  // source's length (0 once released).
  const std::vector<int32_t>& src_slots() const { return src_slots_; }
  const std::vector<int32_t>& src_lengths() const { return src_lengths_; }
  int src_stride() const { return src_stride_; }
  int32_t src_slot(int32_t source, int j) const {
    return src_slots_[static_cast<int64_t>(source) * src_stride_ + j];
  }

  // Rows.
  int rows() const { return static_cast<int>(row_source_.size()); }
  const std::vector<int32_t>& row_source() const { return row_source_; }
  const std::vector<int32_t>& row_pos() const { return row_pos_; }
  const std::vector<int32_t>& row_map() const { return row_map_; }
  // Row i becomes row parents[i] (its source, position and map); then one new row per entry
  // of new_sources, at position 0 attending to that source.
  absl::Status Reorder(const std::vector<int32_t>& parents,
                       const std::vector<int32_t>& new_sources = {});
  // A self slot for a new position of `row`, charged to the row's source (Reserve first).
  int32_t TakeRowSlot(int row);
  // The device's current tables now hold the rows in order (map = identity).
  void TablesGathered();
  // Every row decoded `positions` more.
  void Advance(int positions);

 private:
  struct Pool {
    int capacity = 0;
    std::vector<int32_t> free;  // a stack: lowest ids handed out first
  };
  struct Source {
    bool live = false;
    std::vector<int32_t> self_slots;  // written by its rows
  };

  const char* what_;
  Pool pools_[2];
  std::vector<Source> sources_;
  std::vector<int32_t> free_sources_;
  int live_sources_ = 0;
  int src_stride_ = 0;                // longest source the tables hold
  std::vector<int32_t> src_lengths_;  // per source id
  std::vector<int32_t> src_slots_;    // [source id, src_stride_]
  std::vector<int32_t> row_source_, row_pos_, row_map_;
  std::vector<int32_t> spare_source_, spare_pos_, spare_map_;
};

}  // namespace tnmt::graph
