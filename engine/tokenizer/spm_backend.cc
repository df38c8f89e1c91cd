// SentencePiece calls; see spm_backend.h (no Abseil headers in this file on purpose).
#include "engine/tokenizer/spm_backend.h"

#include <sentencepiece_processor.h>

namespace tnmt {

struct SpmBackend::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SpmBackend::SpmBackend() : impl_(std::make_unique<Impl>()) {}
SpmBackend::~SpmBackend() = default;

bool SpmBackend::Load(const std::string& path, std::string* error) {
  const auto status = impl_->processor.Load(path);
  if (!status.ok()) {
    *error = status.ToString();
    return false;
  }
  return true;
}

bool SpmBackend::Encode(const std::string& text, std::vector<int>* ids, std::string* error) const {
  const auto status = impl_->processor.Encode(text, ids);
  if (!status.ok()) {
    *error = status.ToString();
    return false;
  }
  return true;
}

bool SpmBackend::Decode(const std::vector<int>& ids, std::string* text, std::string* error) const {
  const auto status = impl_->processor.Decode(ids, text);
  if (!status.ok()) {
    *error = status.ToString();
    return false;
  }
  return true;
}

int SpmBackend::vocab_size() const { return impl_->processor.GetPieceSize(); }
int SpmBackend::pad_id() const { return impl_->processor.pad_id(); }
int SpmBackend::unk_id() const { return impl_->processor.unk_id(); }
int SpmBackend::bos_id() const { return impl_->processor.bos_id(); }
int SpmBackend::eos_id() const { return impl_->processor.eos_id(); }

}  // namespace tnmt
