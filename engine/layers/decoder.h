// Transformer decoder with a key/value cache.
//
// DecoderState holds the cross-attention K/V of every source sentence it was given (computed
// once from the encoder output) and the self-attention K/V of every position each hypothesis
// row has decoded. Both live in pools of slots (one slot = one position's K and V in every
// layer) that grow on demand, so sentences can join and leave a running decode between steps
// (continuous batching) and rows may be at different positions. Each row keeps a table of the
// slots holding its positions; Reorder follows beam search's parent choices through these
// tables, never copying K/V (a row shares its ancestors' slots). Slots belong to the source
// sentence whose rows wrote them and are freed together when that sentence is released. The
// bookkeeping is engine/graph/kv_index.h's, as on the GPU; this class holds the host storage.
// DecoderForward appends `t_new` positions for all rows (t_new = 1 for incremental decoding;
// t_new = the whole target for teacher forcing / full recomputation — the same code path).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/graph/kv_index.h"
#include "engine/graph/step_plan.h"
#include "engine/layers/workspace.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace tnmt {

class DecoderState {
 public:
  // A state with no sources and no rows. max_steps: most positions any row may decode (at
  // most the model's limit). row_hint: expected rows, to size buffers up front.
  static absl::StatusOr<DecoderState> Create(const ModelConfig& c, const ModelWeights& w,
                                             int max_steps, int row_hint = 0);
  // Convenience: Create, then AddSources(encoder_out, src_lengths) (sources 0..batch-1).
  static absl::StatusOr<DecoderState> Create(const ModelConfig& c, const ModelWeights& w,
                                             const Tensor& encoder_out,
                                             const int32_t* src_lengths, int row_hint,
                                             int max_steps);

  // Computes the cross-attention K/V of each sentence of encoder_out: [batch, src_len_max, d]
  // (its first src_lengths[b] positions) and returns the sentences' source ids.
  absl::StatusOr<std::vector<int32_t>> AddSources(const Tensor& encoder_out,
                                                  const int32_t* src_lengths);
  // The same for the packed encoder output of EncodeRows: encoder_rows [src_lengths[0] + ... +
  // src_lengths[batch - 1], d], sentence after sentence. No padding position is computed.
  absl::StatusOr<std::vector<int32_t>> AddSourceRows(const Tensor& encoder_rows,
                                                     const int32_t* src_lengths, int batch);
  // Frees a source's K/V slots and its id (which a later AddSources may reuse). No live row
  // may attend to it.
  absl::Status ReleaseSource(int32_t source);

  int rows() const { return index_.rows(); }
  // Positions decoded by the furthest row.
  int steps() const;
  int max_steps() const { return max_steps_; }
  int position(int row) const { return index_.row_pos()[row]; }
  // Source each row attends to.
  const std::vector<int32_t>& kv_index() const { return index_.row_source(); }
  int live_sources() const { return index_.live_sources(); }
  // K/V slots allocated (self + cross), for memory accounting.
  int64_t slots_in_use() const;

  // Replaces all rows by new rows at position 0: row i attends to source kv_index[i].
  absl::Status Start(std::vector<int32_t> kv_index);

  // Row i of the new state is row parents[i] of the current one (its position and slot table
  // are the parent's; no K/V is copied); then one new row at position 0 per entry of
  // new_sources, attending to that source.
  absl::Status Reorder(const std::vector<int32_t>& parents,
                       const std::vector<int32_t>& new_sources = {});

  // Alignments: for each decoder layer in `layers` (distinct, each in [0, decoder layers)),
  // every DecoderForward also records, for every query row (rows x t_new, in order), the
  // source position with the highest cross-attention probability of that layer averaged over
  // the heads (kernels::cpu::AttentionArgmax): alignments()[i] for layers[i]. Empty (the
  // default): nothing is recorded.
  void set_alignment_layers(std::vector<int32_t> layers) { alignment_layers_ = std::move(layers); }
  const std::vector<std::vector<int32_t>>& alignments() const { return alignments_; }

 private:
  // Grows every layer's pool tensor of `pool` to new_capacity slots of 2 * d_model floats.
  // AddSources / AddSourceRows: row_of(b, j) is the row of encoder output enc ([enc_rows, d])
  // holding position j of sentence b.
  template <class RowOf>
  absl::StatusOr<std::vector<int32_t>> AddSourcesFrom(const float* enc, int64_t enc_rows,
                                                      const int32_t* src_lengths, int batch,
                                                      int src_max, RowOf row_of);
  absl::Status GrowPool(std::vector<Tensor>& pool, int old_capacity, int new_capacity);
  absl::Status Reserve(graph::KvIndex::PoolId pool, int64_t more);

  friend absl::Status DecoderForward(const ModelConfig&, const ModelWeights&, DecoderState*,
                                     const int32_t*, int, float*, Workspace*, const float**);
  const ModelConfig* c_ = nullptr;
  const ModelWeights* w_ = nullptr;
  int max_steps_ = 0;
  graph::KvIndex index_{"DecoderState"};
  // Per decoder layer, [capacity, 2 * d_model]: K then V of each slot.
  std::vector<Tensor> self_, cross_;
  // Room for [rows, max_steps_] slot numbers that grows without initializing: a row is
  // written up to its position before anything reads it, so growing (rows join, max_steps_ is
  // the model's whole position limit) neither clears memory nor touches the pages of
  // positions no row reaches. Contents are undefined after Reserve grows it.
  class SlotTables {
   public:
    void Reserve(size_t n) {
      if (n <= capacity_) return;
      capacity_ = std::max(n, capacity_ + capacity_ / 2);
      data_.reset(new int32_t[capacity_]);
    }
    int32_t* data() { return data_.get(); }
    int32_t& operator[](size_t i) { return data_[i]; }

   private:
    std::unique_ptr<int32_t[]> data_;
    size_t capacity_ = 0;
  };
  // [row, max_steps_]: slot holding position p of row r (first row_pos valid), in the rows'
  // order as of the last DecoderForward (index_.row_map() says where each row's is now).
  SlotTables tables_, spare_tables_;
  graph::StepPlan plan_;  // the last step's (engine/graph/step_plan.h), its buffers reused
  std::vector<int32_t> alignment_layers_;
  std::vector<std::vector<int32_t>> alignments_;
};

// ids: [rows, t_new] target tokens at positions steps()..steps()+t_new-1, rows == state->rows().
// logits (if not null): [rows * t_new, vocab] raw scores. hidden (if not null): set to the
// decoder's final hidden states [rows * t_new, d_model], the output projection's input, which
// live in ws until its next use (CpuStepModel projects them a few rows at a time, so that each
// part's logits are scored while still in cache). Advances state->steps() by t_new.
absl::Status DecoderForward(const ModelConfig& c, const ModelWeights& w, DecoderState* state,
                            const int32_t* ids, int t_new, float* logits, Workspace* ws,
                            const float** hidden = nullptr);

}  // namespace tnmt
