// The device seam of decoding. Beam search (beam_search.h) runs on the host and needs only
// three things from a model placed on a device: encode sources and keep what the decoder needs
// of them, follow the beams' parent choices, and score one step for every live row. StepModel
// is that interface; CpuStepModel (engine/cpu) implements it over engine/layers, the CUDA
// engine (engine/cuda) over kernels/cuda. A DecodeBackend is a model's weights resident on one
// device, from which any number of StepModels (one per concurrent decode) are made.
//
// Rows: a StepModel holds `rows()` hypothesis rows, each attending to one source and at its own
// position; Reorder replaces them exactly as DecoderState::Reorder does (engine/layers/decoder.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tnmt {

// One decoder step's scores, per row, as the beam search needs them: the log-softmax
// normalizer, the raw logit of </s>, and the k best tokens other than pad.
struct StepScores {
  int rows = 0;
  int k = 0;
  std::vector<float> lse;        // [rows] log(sum(exp(logits))) of the row
  std::vector<float> eos_logit;  // [rows] raw logit of eos_id
  // [rows, k]: the k largest raw logits of the row, pad_id excluded, best first; equal values
  // in increasing token id. The log-probability of a token is logit - lse.
  std::vector<float> top_logit;
  std::vector<int32_t> top_id;
  // Gathered logits: when the caller fills gather_offsets ([rows + 1], non-decreasing, from 0)
  // and gather_ids (tokens in [0, vocab)) before Step, Step also reports the raw logit of each
  // gathered token in gather_logit (aligned with gather_ids); row r's tokens are
  // gather_ids[gather_offsets[r], gather_offsets[r + 1]). Forced decoding gathers each row's
  // forced token, beam search a target prefix's next token and the tokens a repetition penalty
  // applies to. Empty gather_offsets: nothing is gathered.
  std::vector<int32_t> gather_offsets, gather_ids;
  std::vector<float> gather_logit;
  // Alignments: for each decoder layer in alignment_layers (distinct), Step also fills
  // aligned[i * rows + r]: the source position row r attends to most in layer
  // alignment_layers[i]'s cross-attention, averaged over the heads. Empty: none.
  std::vector<int32_t> alignment_layers;
  std::vector<int32_t> aligned;
  // Whole distributions: when the caller sets want_logprobs before Step, Step also fills
  // logprobs ([rows, vocab]) with every token's log-probability, logit - lse (what an
  // ensemble combines). StepModels that cannot return an error.
  bool want_logprobs = false;
  std::vector<float> logprobs;
  // False: the caller does not read lse (greedy decoding whose scores are not returned), which
  // a StepModel may then leave at 0 and need not compute (unless want_logprobs); every other
  // field is as with true.
  bool want_lse = true;
  // True: score only the candidate set of the model's vocabulary shortlist (a StepModel whose
  // has_shortlist() is true; others return an error): top_id among the candidates, lse over
  // them, gathered logits of any token. See engine/cpu/shortlist_projection.h.
  bool use_shortlist = false;

  // Checks the gather arrays against `rows` and `vocab_size` and sizes gather_logit.
  absl::Status CheckGather(int rows, int vocab_size);
  // Checks every alignment layer against the model's decoder layers.
  absl::Status CheckAlignmentLayers(int decoder_layers) const;

  // Checks 1 <= k < vocab_size (StepModel::Step's contract) and sizes the vectors for `rows`;
  // leaves the gather and alignment requests as they are.
  absl::Status Reset(int rows, int k, int vocab_size);
};

// Fills row r of `s` from that row's logits on the host: lse, eos_logit, the gathered logits,
// the s->k best tokens and, with want_logprobs, every log-probability. The scoring of
// CpuStepModel (engine/cpu), and of an ensemble's combined row; `s` as Reset and CheckGather
// left it.
void ScoreRow(const float* logits, int64_t r, int vocab, int eos_id, int pad_id, StepScores* s);

class StepModel {
 public:
  virtual ~StepModel() = default;

  // ids: [batch, src_max] (row b: lengths[b] >= 1 valid ids, then padding). Encodes the
  // sources, keeps their cross-attention K/V and returns one source id each (a released id may
  // be reused).
  virtual absl::StatusOr<std::vector<int32_t>> AddSources(const int32_t* ids,
                                                          const int32_t* lengths, int batch,
                                                          int src_max) = 0;
  // Frees a source; no live row may attend to it.
  virtual absl::Status ReleaseSource(int32_t source) = 0;
  // Row i becomes the current row parents[i] (same position and cached K/V, nothing copied
  // that needn't be); then one new row at position 0 per new_sources entry.
  virtual absl::Status Reorder(const std::vector<int32_t>& parents,
                               const std::vector<int32_t>& new_sources) = 0;
  virtual int rows() const = 0;
  // ids: [rows()] the token at each row's next position. Runs the decoder one position for
  // every row and fills `scores` with k candidates per row (1 <= k < vocab_size).
  virtual absl::Status Step(const int32_t* ids, int k, StepScores* scores) = 0;
  // Whether Step honours StepScores::use_shortlist (a CPU model loaded with a shortlist).
  virtual bool has_shortlist() const { return false; }
};

class DecodeBackend {
 public:
  virtual ~DecodeBackend() = default;
  // A new, empty StepModel (its own stream and scratch); use each from one thread at a time.
  virtual absl::StatusOr<std::unique_ptr<StepModel>> NewStepModel() const = 0;
  // E.g. "cuda:0 float16".
  virtual std::string Describe() const = 0;
  // Device memory held by the weights.
  virtual int64_t weight_bytes() const = 0;
};

}  // namespace tnmt
