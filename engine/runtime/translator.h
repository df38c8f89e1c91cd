// Translator: text in, text out. Tokenizes, sorts sentences by length, batches them by a
// token budget, decodes each batch and returns results in input order. Per-line problems
// (invalid UTF-8, too long) are per-line errors; the other lines are still translated.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/decode/options.h"
#include "engine/decode/score.h"
#include "engine/runtime/loaded_model.h"

namespace tnmt {

struct TranslationOptions {
  DecodeOptions decode;
  // Source tokens decoded at once, counting padding (each group of sentences encoded together
  // counts its rows x its longest source); Translate adds sentences as others finish.
  int max_batch_tokens = 4096;
  // Longer sources (in pieces, including </s>) are a per-line error.
  int max_input_length = 1024;
  // Sampling stream of the first line (line i draws from first_stream + i).
  uint64_t first_stream = 0;
};

struct TextHypothesis {
  std::string text;
  std::vector<int32_t> ids;
  float score = 0.0f;
  std::vector<float> token_scores;  // DecodeOptions.return_token_scores: per id, then </s>
  std::vector<int32_t> alignments;  // DecodeOptions.return_alignments: per id, a source position
  std::vector<std::string> pieces;  // per id, when asked for (ToTextHypotheses' with_pieces)
};

struct LineTranslation {
  std::vector<TextHypothesis> hypotheses;  // best first
  int source_tokens = 0;                   // pieces including </s>
  std::vector<std::string> source_pieces;  // with return_alignments: </s> excluded
};

// A decode result's hypotheses as text (ids, token scores and alignments kept), best first;
// with_pieces: each id's piece too.
absl::StatusOr<std::vector<TextHypothesis>> ToTextHypotheses(const Tokenizer& tokenizer,
                                                              DecodeResult result, bool with_pieces = false);

// The pieces of a source (ids ending with </s>), </s> excluded: what alignments index.
std::vector<std::string> SourcePieces(const Tokenizer& tokenizer, const std::vector<int32_t>& source);

// TNMT_GPU_BEAM=1 in the environment: Translate decodes with FlatBeamDecoder
// (engine/decode/flat_beam_decoder.h) where it applies - one model, no target prefixes,
// options it supports - its step's selection on the GPU beside the CUDA engine's scores
// (engine/cuda/cuda_beam_stepper.h), on the host for other engines. The outputs are the same
// either way; the switch exists to time both paths on one card.
bool FlatBeamRequested();

class Translator {
 public:
  explicit Translator(std::shared_ptr<const LoadedModel> model);
  // An ensemble: `model` and each of `more` decode together, every step's distribution the
  // members' normalized geometric mean (engine/decode/ensemble_step_model.h); `model` also
  // tokenizes. The members must pass CheckEnsembleMembers against `model`; the position limits
  // are the smallest member's.
  Translator(std::shared_ptr<const LoadedModel> model, std::vector<std::shared_ptr<const LoadedModel>> more);

  // Called after each batch with (lines done, lines total).
  using Progress = std::function<void(int, int)>;

  // One entry per input line. Fails as a whole only for invalid options or internal errors.
  // target_prefixes: null, or one per line (empty: none), tokenized as target text and forced
  // as the start of that line's hypotheses; a prefix that cannot be tokenized or leaves no
  // room within the line's maximum output length is that line's error. Sampling draws line
  // i's tokens from stream options.first_stream + i.
  absl::StatusOr<std::vector<absl::StatusOr<LineTranslation>>> Translate(
      const std::vector<std::string>& lines, const TranslationOptions& options,
      const Progress& progress = nullptr, const std::vector<std::string>* target_prefixes = nullptr);

  // Forced decoding of (source, target) pairs (engine/decode/score.h): one entry per pair,
  // a per-pair error for text that cannot be tokenized or is too long (limits as Translate's).
  // Batched by max_batch_tokens over sources and targets.
  absl::StatusOr<std::vector<absl::StatusOr<PairScore>>> Score(const std::vector<std::string>& sources,
                                                               const std::vector<std::string>& targets,
                                                               const TranslationOptions& options);

  const LoadedModel& model() const { return *model_; }

 private:
  // A StepModel of the model, or of the ensemble.
  absl::StatusOr<std::unique_ptr<StepModel>> NewStepModel();

  std::shared_ptr<const LoadedModel> model_;
  std::vector<std::shared_ptr<const LoadedModel>> more_;  // further ensemble members
  ModelConfig config_;  // model_'s, with the ensemble's position limit
};

}  // namespace tnmt
