// SentencePiece training through the run-time loaded shim; see spm_train_backend.h and
// engine/tokenizer/spm_library.h.
#include "trainer/data/spm_train_backend.h"

#include "engine/tokenizer/spm_library.h"

namespace tnmt::data {

bool TrainSentencePieceModel(const std::map<std::string, std::string>& flags, unsigned random_seed,
                             SentenceSource* source, std::string* model_proto, std::string* error) {
  if (flags.count("model_prefix") != 0) {
    *error = "model_prefix must not be set: the model is returned in memory";
    return false;
  }
  const SpmLibrary* lib = GetSpmLibrary(error);
  if (lib == nullptr) return false;
  auto next = [](void* ctx, std::string* out) { return static_cast<SentenceSource*>(ctx)->Next(out); };
  auto failed = [](void* ctx) { return static_cast<SentenceSource*>(ctx)->failed(); };
  return lib->train(&flags, random_seed, next, failed, source, model_proto, error);
}

}  // namespace tnmt::data
