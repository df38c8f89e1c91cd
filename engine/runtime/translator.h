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
#include "engine/layers/workspace.h"
#include "engine/runtime/loaded_model.h"

namespace tnmt {

struct TranslationOptions {
  DecodeOptions decode;
  // Source tokens per batch, counting padding (batch rows x longest source).
  int max_batch_tokens = 4096;
  // Longer sources (in pieces, including </s>) are a per-line error.
  int max_input_length = 1024;
};

struct TextHypothesis {
  std::string text;
  std::vector<int32_t> ids;
  float score = 0.0f;
};

struct LineTranslation {
  std::vector<TextHypothesis> hypotheses;  // best first
  int source_tokens = 0;                   // pieces including </s>
};

// A decode result's hypotheses as text (ids kept), best first.
absl::StatusOr<std::vector<TextHypothesis>> ToTextHypotheses(const Tokenizer& tokenizer,
                                                              DecodeResult result);

class Translator {
 public:
  explicit Translator(std::shared_ptr<const LoadedModel> model) : model_(std::move(model)) {}

  // Called after each batch with (lines done, lines total).
  using Progress = std::function<void(int, int)>;

  // One entry per input line. Fails as a whole only for invalid options or internal errors.
  absl::StatusOr<std::vector<absl::StatusOr<LineTranslation>>> Translate(
      const std::vector<std::string>& lines, const TranslationOptions& options,
      const Progress& progress = nullptr);

  // Forced decoding of (source, target) pairs (engine/decode/score.h): one entry per pair,
  // a per-pair error for text that cannot be tokenized or is too long (limits as Translate's).
  // Batched by max_batch_tokens over sources and targets.
  absl::StatusOr<std::vector<absl::StatusOr<PairScore>>> Score(const std::vector<std::string>& sources,
                                                               const std::vector<std::string>& targets,
                                                               const TranslationOptions& options);

  const LoadedModel& model() const { return *model_; }

 private:
  std::shared_ptr<const LoadedModel> model_;
  Workspace workspace_;
};

}  // namespace tnmt
