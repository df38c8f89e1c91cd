// Greedy and beam-search decoding of a batch of source sentences, exactly as specified in
// docs/model-format.md ("Beam search"). The encoder runs once per batch, cross-attention K/V
// once per source, self-attention K/V are cached and reordered by beam; sentences that finish
// leave the batch and new ones may join between steps. A sentence's result does not depend on
// the other sentences decoded with it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/decode/options.h"
#include "engine/decode/step_model.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace tnmt {

// A decode that sentences can join and leave between steps (continuous batching). Each
// sentence carries its own options (beam size, length penalty, limits, n-best); one Step()
// advances every live hypothesis of every sentence by one token in a single decoder pass.
// Not thread-safe; the config must outlive it.
class BeamDecoder {
 public:
  // Over any device's StepModel (step_model.h; DecodeBackend::NewStepModel makes one) of a
  // model with config `c`.
  static BeamDecoder Create(const ModelConfig& c, std::unique_ptr<StepModel> model);
  BeamDecoder(BeamDecoder&&) noexcept;
  BeamDecoder& operator=(BeamDecoder&&) noexcept;
  ~BeamDecoder();

  // Validates, encodes the sources (one encoder pass) and makes them live. Returns one handle
  // per source (unique for this decoder). Nothing is added when an error is returned.
  absl::StatusOr<std::vector<int64_t>> Add(const std::vector<std::vector<int32_t>>& sources,
                                           const DecodeOptions& options);
  // The same with a target prefix and a sampling stream per source (Add above: no prefix,
  // stream = index in `sources`). A prefix must leave room for </s> within the sentence's
  // maximum output length.
  absl::StatusOr<std::vector<int64_t>> Add(const std::vector<DecodeInput>& inputs,
                                           const DecodeOptions& options);

  struct Done {
    int64_t handle;
    DecodeResult result;
  };
  // One decoder step for every live sentence; sentences that finish are appended to `done`
  // (in the order they were added) and leave the decode.
  absl::Status Step(std::vector<Done>* done);

  // Drops a live sentence without a result (cancelled or past its deadline). False if the
  // handle is not live.
  bool Cancel(int64_t handle);

  // Tests: false keeps live hypotheses that can no longer enter a sentence's n_best (they are
  // dropped by default; the output is the same either way, docs/model-format.md). Without
  // dropping, a sentence still stops once its best live hypothesis is past that bar.
  void set_prune_for_testing(bool prune) { prune_ = prune; }

  int live_sentences() const { return static_cast<int>(live_.size() + joining_.size()); }
  int live_rows() const;  // hypotheses decoded by the next Step()
  bool empty() const { return live_.empty() && joining_.empty(); }

 private:
  struct Sentence;
  BeamDecoder(const ModelConfig& c, std::unique_ptr<StepModel> model);
  absl::Status Release(Sentence& s);

  const ModelConfig* c_;
  std::unique_ptr<StepModel> model_;
  int64_t next_handle_ = 0;
  std::vector<std::unique_ptr<Sentence>> live_;  // in order of Add
  std::vector<std::unique_ptr<Sentence>> joining_;
  StepScores scores_;
  std::vector<int32_t> step_ids_;
  bool prune_ = true;
};

// Decodes a batch of sources (each ending with eos_id, non-empty, within the model's position
// limit, all ids in [0, vocab)) with `decoder` (any device), which must be empty and is empty
// after. Returns one result per source, in order.
absl::StatusOr<std::vector<DecodeResult>> Decode(BeamDecoder& decoder,
                                                 const std::vector<std::vector<int32_t>>& sources,
                                                 const DecodeOptions& options);
absl::StatusOr<std::vector<DecodeResult>> Decode(BeamDecoder& decoder, const std::vector<DecodeInput>& inputs,
                                                 const DecodeOptions& options);

// Decode's loop for any decoder with BeamDecoder's Add/Step/empty (FlatBeamDecoder too):
// `inputs` (sources or DecodeInputs) added to the idle decoder, stepped to the end.
template <class Decoder, class Inputs>
absl::StatusOr<std::vector<DecodeResult>> DecodeToEnd(Decoder& decoder, const Inputs& inputs,
                                                      const DecodeOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  std::vector<DecodeResult> results(inputs.size());
  if (inputs.empty()) return results;
  if (!decoder.empty()) return absl::FailedPreconditionError("Decode needs an idle decoder");
  absl::StatusOr<std::vector<int64_t>> handles = decoder.Add(inputs, options);
  if (!handles.ok()) return handles.status();
  std::vector<typename Decoder::Done> done;
  while (!decoder.empty()) {
    done.clear();
    if (absl::Status s = decoder.Step(&done); !s.ok()) return s;
    for (auto& d : done) results[d.handle - (*handles)[0]] = std::move(d.result);
  }
  return results;
}

// Length penalty lp(n) = ((5 + n) / 6)^alpha (kGnmt) or n^alpha (kLength); both grow with n
// for alpha >= 0, which the stopping rule relies on.
double LengthPenalty(int length, double alpha, LengthPenaltyStyle style = LengthPenaltyStyle::kGnmt);

}  // namespace tnmt
