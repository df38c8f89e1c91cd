// The output projection restricted to a vocabulary shortlist's candidate set (DecodeOptions::
// use_shortlist, engine/model/shortlist.h), for CpuStepModel: the candidates' rows of the
// projection (and of the logits bias) gathered into a compact matrix once per candidate set,
// packed as the model's full projection is (float32 or int8, PackForInference), so that a
// step's logits cost C/V of the full projection's.
//
// The projected rows are the candidates and <pad>: <pad> is never a candidate token (top-k
// excludes it, as without a shortlist) but counts in the normalizer, so that a table covering
// the whole vocabulary gives exactly the scores of the full projection.
// Scores over the compact logits, as ScoreRow (engine/decode/step_model.h) over a full row:
// lse is the log-sum-exp over the projected rows only (a shortlisted log-probability is
// therefore normalized over the candidate set, not the vocabulary); top_id are vocabulary ids, ties in
// increasing id as the candidates are sorted; eos_logit is a candidate's (</s> always is one); a
// gathered token outside the set (a target prefix's forced token) gets its logit from one dot
// product with its own row of the projection in float32 (bias added), so forced decoding through
// a shortlist is never refused. Whole distributions (want_logprobs) give -inf outside the set.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/decode/step_model.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "kernels/cpu/gemm.h"

namespace tnmt {

class ShortlistProjection {
 public:
  // c and w must outlive the projection.
  ShortlistProjection(const ModelConfig& c, const ModelWeights& w) : c_(c), w_(w) {}

  // candidates: sorted, distinct ids in [0, vocab). Gathers (and packs) their rows and <pad>'s.
  void SetCandidates(std::vector<int32_t> candidates);
  int size() const { return static_cast<int>(ids_.size()); }  // projected rows
  int candidate_tokens() const { return size() - (pad_position_ >= 0 ? 1 : 0); }  // <pad> aside
  const std::vector<int32_t>& candidates() const { return ids_; }
  // Whether every id of `ids` (in [0, vocab)) is a candidate.
  bool Covers(const std::vector<int32_t>& ids) const;

  // logits: [rows, size()] = x: [rows, d] · projection[candidates]^T (+ bias[candidates]).
  void Logits(float* logits, const float* x, int64_t rows) const;
  // Fills row r of s (Reset and CheckGather done; s->k <= candidate_tokens()) from that row's compact
  // logits and its hidden state x_row: [d].
  void ScoreRow(const float* logits, const float* x_row, int64_t r, StepScores* s) const;

 private:
  const ModelConfig& c_;
  const ModelWeights& w_;
  std::vector<int32_t> ids_;       // [C] compact index -> vocabulary id (<pad> included)
  int32_t pad_position_ = -1;      // <pad>'s compact index (-1: the model has none)
  std::vector<int32_t> position_;  // [vocab] vocabulary id -> compact index, or -1
  std::vector<float> weight_;      // [C, d] the candidates' rows of the projection
  std::vector<float> bias_;        // [C] their logits bias (empty without one)
  kernels::cpu::PackedMatrix packed_;  // weight_ packed as the full projection is (or empty)
};

}  // namespace tnmt
