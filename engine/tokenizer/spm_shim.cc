// libtnmt_spm.so: SentencePiece behind a handful of extern "C" entry points, loaded at run time
// by spm_library.cc with RTLD_LOCAL | RTLD_DEEPBIND. Debian's libsentencepiece carries and
// exports its own copy of protobuf-lite 3.14; a process that also links the system protobuf
// (gRPC, the server) would otherwise resolve one library's protobuf calls into the other's and
// abort on the version check. Loaded this way, SentencePiece binds to its own copy first and
// nothing of it enters the global symbol scope. Both sides share libstdc++, so std types pass.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using Processor = sentencepiece::SentencePieceProcessor;

bool Fail(const sentencepiece::util::Status& status, std::string* error) {
  if (status.ok()) return true;
  *error = status.ToString();
  return false;
}

// Feeds the caller's sentences to SentencePiece's trainer.
class CallbackIterator : public sentencepiece::SentenceIterator {
 public:
  CallbackIterator(bool (*next)(void*, std::string*), bool (*failed)(void*), void* ctx)
      : next_(next), failed_(failed), ctx_(ctx) {
    Next();
  }
  bool done() const override { return done_; }
  void Next() override { done_ = !next_(ctx_, &value_); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override {
    if (failed_(ctx_)) {
      return sentencepiece::util::Status(sentencepiece::util::StatusCode::kAborted,
                                         "reading the training sentences failed");
    }
    return sentencepiece::util::Status();
  }

 private:
  bool (*next_)(void*, std::string*);
  bool (*failed_)(void*);
  void* ctx_;
  std::string value_;
  bool done_ = false;
};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* tnmt_spm_load(const std::string* path, std::string* error) {
  auto* p = new Processor();
  if (!Fail(p->Load(*path), error)) {
    delete p;
    return nullptr;
  }
  return p;
}

__attribute__((visibility("default"))) void tnmt_spm_free(void* processor) {
  delete static_cast<Processor*>(processor);
}

__attribute__((visibility("default"))) bool tnmt_spm_encode(const void* processor, const std::string* text,
                                                            std::vector<int>* ids, std::string* error) {
  return Fail(static_cast<const Processor*>(processor)->Encode(*text, ids), error);
}

__attribute__((visibility("default"))) bool tnmt_spm_decode(const void* processor, const std::vector<int>* ids,
                                                            std::string* text, std::string* error) {
  return Fail(static_cast<const Processor*>(processor)->Decode(*ids, text), error);
}

__attribute__((visibility("default"))) bool tnmt_spm_encode_pieces(const void* processor, const std::string* text,
                                                                   std::vector<std::string>* pieces,
                                                                   std::string* error) {
  return Fail(static_cast<const Processor*>(processor)->Encode(*text, pieces), error);
}

__attribute__((visibility("default"))) bool tnmt_spm_decode_pieces(const void* processor,
                                                                   const std::vector<std::string>* pieces,
                                                                   std::string* text, std::string* error) {
  return Fail(static_cast<const Processor*>(processor)->Decode(*pieces, text), error);
}

__attribute__((visibility("default"))) bool tnmt_spm_id_to_piece(const void* processor, int id,
                                                                 std::string* piece, bool* control) {
  const auto* p = static_cast<const Processor*>(processor);
  if (id < 0 || id >= p->GetPieceSize()) return false;
  *piece = p->IdToPiece(id);
  *control = p->IsControl(id) || p->IsUnknown(id);
  return true;
}

// Up to `nbest` best segmentations of `text`, best first, with their log-probabilities.
__attribute__((visibility("default"))) bool tnmt_spm_nbest(const void* processor, const std::string* text, int nbest,
                                                           std::vector<std::vector<int>>* ids,
                                                           std::vector<float>* scores, std::string* error) {
  const auto* p = static_cast<const Processor*>(processor);
  sentencepiece::ImmutableNBestSentencePieceText result;
  if (!Fail(p->NBestEncode(*text, nbest, result.mutable_proto()), error)) return false;
  ids->clear();
  scores->clear();
  for (const auto& segmentation : result.nbests()) {
    std::vector<int> pieces;
    for (const auto& piece : segmentation.pieces()) pieces.push_back(static_cast<int>(piece.id()));
    ids->push_back(std::move(pieces));
    scores->push_back(segmentation.score());
  }
  return true;
}

// what: 0 vocabulary size, 1 pad id, 2 unk id, 3 bos id, 4 eos id.
__attribute__((visibility("default"))) int tnmt_spm_info(const void* processor, int what) {
  const auto* p = static_cast<const Processor*>(processor);
  switch (what) {
    case 0: return p->GetPieceSize();
    case 1: return p->pad_id();
    case 2: return p->unk_id();
    case 3: return p->bos_id();
    case 4: return p->eos_id();
    default: return -1;
  }
}

__attribute__((visibility("default"))) bool tnmt_spm_train(const std::map<std::string, std::string>* flags,
                                                           unsigned seed, bool (*next)(void*, std::string*),
                                                           bool (*failed)(void*), void* ctx,
                                                           std::string* model_proto, std::string* error) {
  sentencepiece::SetRandomGeneratorSeed(seed);
  const std::unordered_map<std::string, std::string> kwargs(flags->begin(), flags->end());
  CallbackIterator iterator(next, failed, ctx);
  return Fail(sentencepiece::SentencePieceTrainer::Train(kwargs, &iterator, model_proto), error);
}

}  // extern "C"
