// Beam search and greedy decoding with the flat step (kernels/beam_step.h), beside
// BeamDecoder (beam_search.h) with the same interface for what it supports: the same outputs,
// tokens and scores bit for bit, on the same StepModel (engine/decode/flat_beam_decoder_test).
// The step's selection runs where its FlatBeamStepper says (flat_beam_step.h): on the host,
// or on the GPU beside the model's scores (engine/cuda/cuda_beam_stepper.h), so that a step
// brings back the chosen tokens and parents instead of every row's candidates.
//
// Supported (FlatBeamDecoder::Supports): beam sizes 1..kernels::kMaxFlatBeam (1: greedy), any
// length penalty and style, max_length / max_length_offset, min_length, return_scores,
// n_best 1. Everything else falls back to BeamDecoder: target prefixes and forced decoding
// (score), n_best > 1, sampling, disable_unk, no_repeat_ngram_size, repetition_penalty,
// return_token_scores, return_alignments, use_shortlist, and ensembles on the GPU (a CUDA stepper needs one
// CudaStepModel; the host stepper takes any StepModel). All sentences of one decoder share
// one DecodeOptions. Sentences join between steps (continuous batching) and leave when done,
// as in BeamDecoder; rows are laid out as BeamDecoder lays them out, so the model computes
// the same rows in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/decode/beam_search.h"
#include "engine/decode/flat_beam_step.h"
#include "engine/decode/options.h"
#include "engine/decode/step_model.h"
#include "engine/model/config.h"

namespace tnmt {

class FlatBeamDecoder {
 public:
  using Done = BeamDecoder::Done;

  // Whether `o` decodes with the flat step (see above; prefixes are the inputs' business).
  static bool Supports(const DecodeOptions& o);

  // Over `model` (a model with config `c`, which must outlive the decoder) with steps run by
  // `stepper`.
  FlatBeamDecoder(const ModelConfig& c, std::unique_ptr<StepModel> model,
                  std::unique_ptr<FlatBeamStepper> stepper);
  FlatBeamDecoder(FlatBeamDecoder&&) noexcept;
  FlatBeamDecoder& operator=(FlatBeamDecoder&&) noexcept;
  ~FlatBeamDecoder();

  // As BeamDecoder::Add; options must be Supported and equal to those of the sentences
  // already live, and inputs carry no prefix.
  absl::StatusOr<std::vector<int64_t>> Add(const std::vector<DecodeInput>& inputs,
                                           const DecodeOptions& options);
  absl::StatusOr<std::vector<int64_t>> Add(const std::vector<std::vector<int32_t>>& sources,
                                           const DecodeOptions& options);
  // As BeamDecoder::Step.
  absl::Status Step(std::vector<Done>* done);

  int live_sentences() const { return static_cast<int>(live_.size() + joining_.size()); }
  int live_rows() const;
  bool empty() const { return live_.empty() && joining_.empty(); }

 private:
  struct Sentence;

  const ModelConfig* c_;
  std::unique_ptr<StepModel> model_;
  std::unique_ptr<FlatBeamStepper> stepper_;
  std::optional<DecodeOptions> opt_;  // the live sentences' options
  int64_t next_handle_ = 0;
  std::vector<std::unique_ptr<Sentence>> live_;  // in order of Add; rows in this order
  std::vector<std::unique_ptr<Sentence>> joining_;
  std::vector<int32_t> step_ids_;  // [rows] each row's next input token
  FlatBeamStep step_;
};

// Decode (beam_search.h) with a FlatBeamDecoder.
absl::StatusOr<std::vector<DecodeResult>> Decode(FlatBeamDecoder& decoder,
                                                 const std::vector<std::vector<int32_t>>& sources,
                                                 const DecodeOptions& options);

}  // namespace tnmt
