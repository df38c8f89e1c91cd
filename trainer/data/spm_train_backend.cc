// SentencePiece trainer calls; see spm_train_backend.h (no Abseil headers in this file on
// purpose).
#include "trainer/data/spm_train_backend.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <unordered_map>

namespace tnmt::data {
namespace {

// Adapts SentenceSource to SentencePiece's iterator protocol, where value() is valid as soon
// as done() is false.
class SourceIterator : public sentencepiece::SentenceIterator {
 public:
  explicit SourceIterator(SentenceSource* source) : source_(source) { Next(); }
  bool done() const override { return done_; }
  void Next() override { done_ = !source_->Next(&value_); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override {
    if (source_->failed()) {
      return sentencepiece::util::Status(sentencepiece::util::StatusCode::kAborted,
                                         "reading the training sentences failed");
    }
    return sentencepiece::util::Status();
  }

 private:
  SentenceSource* source_;
  std::string value_;
  bool done_ = false;
};

}  // namespace

bool TrainSentencePieceModel(const std::map<std::string, std::string>& flags, unsigned random_seed,
                             SentenceSource* source, std::string* model_proto, std::string* error) {
  if (flags.count("model_prefix") != 0) {
    *error = "model_prefix must not be set: the model is returned in memory";
    return false;
  }
  sentencepiece::SetRandomGeneratorSeed(random_seed);
  const std::unordered_map<std::string, std::string> kwargs(flags.begin(), flags.end());
  SourceIterator iterator(source);
  const sentencepiece::util::Status status =
      sentencepiece::SentencePieceTrainer::Train(kwargs, &iterator, model_proto);
  if (!status.ok()) {
    *error = status.ToString();
    return false;
  }
  return true;
}

}  // namespace tnmt::data
