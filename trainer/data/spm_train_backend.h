// SentencePiece training behind a std-only interface, through the run-time loaded shim
// (engine/tokenizer/spm_library.h; the same rule as engine/tokenizer/spm_backend.h).
#pragma once

#include <map>
#include <string>

namespace tnmt::data {

// Streams training sentences to the trainer.
class SentenceSource {
 public:
  virtual ~SentenceSource() = default;
  // Stores the next sentence and returns true; returns false at the end or on an error (the
  // source keeps the error for its owner to report).
  virtual bool Next(std::string* sentence) = 0;
  // True if Next stopped because of an error.
  virtual bool failed() const = 0;
};

// Trains a SentencePiece model. `flags` are SentencePiece trainer flags by name (e.g.
// {"vocab_size", "8000"}); "model_prefix" must be absent: the model comes back serialized in
// *model_proto. `random_seed` seeds SentencePiece's (process-wide) random generator. Returns
// false and sets *error on failure.
bool TrainSentencePieceModel(const std::map<std::string, std::string>& flags, unsigned random_seed,
                             SentenceSource* source, std::string* model_proto, std::string* error);

}  // namespace tnmt::data
