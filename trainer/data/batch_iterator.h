// Token-budget batches over a Dataset, bucketed by length, in a random but reproducible order,
// resumable at any batch and shardable across data-parallel ranks.
//
// The plan of epoch e (0-based) is a pure function of the dataset's lengths, the options and
// (seed, e):
//  1. rng = std::mt19937_64 seeded with std::seed_seq{seed & 0xffffffff, seed >> 32,
//     e & 0xffffffff, e >> 32} (both fully specified by the C++ standard); shuffles below are
//     our own Fisher-Yates with rejection sampling, so the plan is the same on every platform.
//  2. Shuffle all pair indices. Cut the result into windows of sort_window_batches x (the
//     average number of pairs per batch); stable-sort each window by (max(source, target)
//     length, source length, target length).
//  3. Walk each window in order, closing a batch when adding the next pair would exceed the
//     budget: a batch of n pairs costs n x max(longest source + 1, longest target + 1) tokens
//     (padding included) and must cost <= max_tokens; a pair over the budget alone forms its
//     own batch. Batches never span windows.
//  4. Shuffle the order of the batches.
// With shuffle = false, step 1, 2's shuffle and 4 are skipped and the whole dataset is one
// window (sorted by length; the same plan every epoch) — for validation.
//
// Sharding: with G batches in the epoch's global plan, each rank gets floor(G / world_size)
// batches: rank r takes global batches r, r + world_size, r + 2 world_size, ... and the last
// G mod world_size batches are left out of that epoch, so all ranks agree on where epochs end.
// A rank needs no communication for this: every rank computes the same global plan.
//
// Position {epoch, batch_in_epoch} names the next batch this rank will yield (batch_in_epoch
// counts this rank's batches, and is the same on every rank that has yielded as many). Seek to
// a saved Position continues exactly as an uninterrupted iterator would.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/data/dataset.h"

namespace tnmt::data {

struct BatchOptions {
  int64_t max_tokens = 4096;  // per batch, padding included (see above)
  uint64_t seed = 1;
  bool shuffle = true;            // false: fixed length-sorted order (validation)
  int sort_window_batches = 100;  // length-sorting window, in average batches
  int rank = 0;                   // this process's shard, 0 <= rank < world_size
  int world_size = 1;
  // Special ids, from the model config.
  int32_t pad_id = 0;
  int32_t bos_id = 2;
  int32_t eos_id = 3;
};

struct DataPosition {
  int64_t epoch = 0;           // 0-based
  int64_t batch_in_epoch = 0;  // batches of this epoch already yielded by this rank
};

struct Batch {
  int batch_size = 0;
  int src_len = 0;                    // longest source + 1 (eos)
  int tgt_len = 0;                    // longest target + 1 (bos or eos)
  std::vector<int32_t> src;           // [batch_size, src_len]: ids, eos, then pad
  std::vector<int32_t> src_lengths;   // [batch_size]: ids + 1 (eos)
  std::vector<int32_t> tgt_in;        // [batch_size, tgt_len]: bos, ids, then pad
  std::vector<int32_t> tgt_out;       // [batch_size, tgt_len]: ids, eos, then pad
  int64_t src_tokens = 0;             // non-pad entries of src
  int64_t tgt_tokens = 0;             // non-pad entries of tgt_out (= of tgt_in)
  std::vector<int64_t> pair_indices;  // [batch_size]: the Dataset pair of each row
};

class BatchIterator {
 public:
  // `dataset` must outlive the iterator. INVALID_ARGUMENT for bad options,
  // FAILED_PRECONDITION when the dataset is empty or too small for world_size ranks.
  static absl::StatusOr<std::unique_ptr<BatchIterator>> Create(const Dataset* dataset,
                                                               const BatchOptions& options);

  // Fills *batch with the next batch, moving to the next epoch after the last one.
  absl::Status Next(Batch* batch);

  // Where the next call to Next will read.
  DataPosition Position() const { return {epoch_, cursor_}; }
  // Moves to `position` (as returned by Position on an iterator with the same dataset and
  // options). OUT_OF_RANGE if batch_in_epoch is beyond that epoch's batches.
  absl::Status Seek(const DataPosition& position);

  // Batches this rank yields in the current epoch (may differ slightly between epochs, since
  // the windows hold different pairs).
  int64_t batches_per_epoch() const { return static_cast<int64_t>(local_batches_.size()); }
  // Pairs in a length-sorting window.
  int64_t window_pairs() const { return window_pairs_; }

 private:
  struct Span {  // batch = order_[begin, end)
    int64_t begin;
    int64_t end;
  };

  BatchIterator(const Dataset* dataset, const BatchOptions& options)
      : dataset_(dataset), options_(options) {}
  absl::Status PlanEpoch(int64_t epoch);
  absl::Status Fill(const Span& span, Batch* batch) const;

  const Dataset* dataset_;
  BatchOptions options_;
  int64_t window_pairs_ = 1;
  int64_t epoch_ = -1;  // epoch the plan below belongs to
  int64_t cursor_ = 0;
  std::vector<uint32_t> order_;      // pair indices in plan order
  std::vector<Span> local_batches_;  // this rank's batches, in order
};

}  // namespace tnmt::data
