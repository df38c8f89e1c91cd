// SentencePiece calls through the run-time loaded shim; see spm_backend.h and spm_library.h.
#include "engine/tokenizer/spm_backend.h"

#include "engine/tokenizer/spm_library.h"

namespace tnmt {

struct SpmBackend::Impl {
  const SpmLibrary* lib = nullptr;
  void* processor = nullptr;
  ~Impl() {
    if (processor != nullptr) lib->free(processor);
  }
};

SpmBackend::SpmBackend() : impl_(std::make_unique<Impl>()) {}
SpmBackend::~SpmBackend() = default;

bool SpmBackend::Load(const std::string& path, std::string* error) {
  const SpmLibrary* lib = GetSpmLibrary(error);
  if (lib == nullptr) return false;
  void* p = lib->load(&path, error);
  if (p == nullptr) return false;
  impl_ = std::make_unique<Impl>();
  impl_->lib = lib;
  impl_->processor = p;
  return true;
}

bool SpmBackend::Encode(const std::string& text, std::vector<int>* ids, std::string* error) const {
  if (impl_->processor == nullptr) return *error = "no SentencePiece model loaded", false;
  return impl_->lib->encode(impl_->processor, &text, ids, error);
}

bool SpmBackend::NBestEncode(const std::string& text, int nbest, std::vector<std::vector<int>>* ids,
                             std::vector<float>* scores, std::string* error) const {
  if (impl_->processor == nullptr) return *error = "no SentencePiece model loaded", false;
  return impl_->lib->nbest(impl_->processor, &text, nbest, ids, scores, error);
}

bool SpmBackend::Decode(const std::vector<int>& ids, std::string* text, std::string* error) const {
  if (impl_->processor == nullptr) return *error = "no SentencePiece model loaded", false;
  return impl_->lib->decode(impl_->processor, &ids, text, error);
}

bool SpmBackend::EncodePieces(const std::string& text, std::vector<std::string>* pieces,
                              std::string* error) const {
  if (impl_->processor == nullptr) return *error = "no SentencePiece model loaded", false;
  return impl_->lib->encode_pieces(impl_->processor, &text, pieces, error);
}

bool SpmBackend::DecodePieces(const std::vector<std::string>& pieces, std::string* text,
                              std::string* error) const {
  if (impl_->processor == nullptr) return *error = "no SentencePiece model loaded", false;
  return impl_->lib->decode_pieces(impl_->processor, &pieces, text, error);
}

bool SpmBackend::IdToPiece(int id, std::string* piece, bool* control) const {
  return impl_->processor != nullptr && impl_->lib->id_to_piece(impl_->processor, id, piece, control);
}

int SpmBackend::vocab_size() const { return impl_->processor ? impl_->lib->info(impl_->processor, 0) : 0; }
int SpmBackend::pad_id() const { return impl_->processor ? impl_->lib->info(impl_->processor, 1) : -1; }
int SpmBackend::unk_id() const { return impl_->processor ? impl_->lib->info(impl_->processor, 2) : -1; }
int SpmBackend::bos_id() const { return impl_->processor ? impl_->lib->info(impl_->processor, 3) : -1; }
int SpmBackend::eos_id() const { return impl_->processor ? impl_->lib->info(impl_->processor, 4) : -1; }

}  // namespace tnmt
