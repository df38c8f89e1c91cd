// Transformer decoder with a key/value cache.
//
// DecoderState holds, for one batch of source sentences, the cross-attention K/V of every
// layer (computed once from the encoder output) and the self-attention K/V of every layer for
// every live hypothesis row and every position decoded so far. DecoderForward appends `t_new`
// positions for all rows (t_new = 1 for incremental decoding; t_new = the whole target for
// teacher forcing / full recomputation — the same code path). Reorder follows beam search's
// parent choices and can grow or shrink the row count without copying any K/V: each
// (physical row, position) entry is written exactly once, and every live row keeps a table of
// which physical row holds each of its positions (its ancestors' entries are shared).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/layers/workspace.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace tnmt {

class DecoderState {
 public:
  // encoder_out: [batch, src_len_max, d]; src_lengths: [batch].
  // max_rows: most hypothesis rows ever live; max_steps: most positions ever decoded.
  static absl::StatusOr<DecoderState> Create(const ModelConfig& c, const ModelWeights& w,
                                             const Tensor& encoder_out,
                                             const int32_t* src_lengths, int max_rows,
                                             int max_steps);

  int rows() const { return rows_; }
  int steps() const { return steps_; }
  int max_steps() const { return max_steps_; }
  // Source sentence (index into the encoder batch) that each row attends to.
  const std::vector<int32_t>& kv_index() const { return kv_index_; }

  // Sets the initial rows (before any step): row i attends to source kv_index[i].
  absl::Status Start(std::vector<int32_t> kv_index);

  // Row i of the new state is row parents[i] of the current one (its position table is the
  // parent's; no K/V is copied). The source of each row follows its parent.
  absl::Status Reorder(const std::vector<int32_t>& parents);

 private:
  friend absl::Status DecoderForward(const ModelConfig&, const ModelWeights&, DecoderState*,
                                     const int32_t*, int, float*, Workspace*);
  int d_model_ = 0;
  int max_rows_ = 0;
  int max_steps_ = 0;
  int src_max_ = 0;
  int rows_ = 0;
  int steps_ = 0;
  std::vector<int32_t> kv_index_;
  std::vector<int32_t> src_lengths_;
  std::vector<Tensor> self_kv_;   // per layer [max_rows, max_steps, 2*d]: K then V per position
  // [max_rows, max_steps]: physical row of the cache holding position p of live row r.
  std::vector<int32_t> slots_, spare_slots_;
  std::vector<Tensor> cross_kv_;  // per layer [batch, src_max, 2*d]
};

// ids: [rows, t_new] target tokens at positions steps()..steps()+t_new-1, rows == state->rows().
// logits (if not null): [rows * t_new, vocab] raw scores. Advances state->steps() by t_new.
absl::Status DecoderForward(const ModelConfig& c, const ModelWeights& w, DecoderState* state,
                            const int32_t* ids, int t_new, float* logits, Workspace* ws);

}  // namespace tnmt
