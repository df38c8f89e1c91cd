// The SentencePiece shim (libtnmt_spm.so, see spm_shim.cc), loaded once per process with
// RTLD_LOCAL | RTLD_DEEPBIND so SentencePiece's bundled protobuf never meets the system one.
// Searched, in order: $TNMT_SPM_LIBRARY; next to the executable; <exe dir>/../lib/tnmt/;
// the Bazel runfiles of the executable or test ($RUNFILES_DIR, $TEST_SRCDIR, <exe>.runfiles).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace tnmt {

struct SpmLibrary {
  void* (*load)(const std::string* path, std::string* error);
  void (*free)(void* processor);
  bool (*encode)(const void* processor, const std::string* text, std::vector<int>* ids, std::string* error);
  bool (*decode)(const void* processor, const std::vector<int>* ids, std::string* text, std::string* error);
  int (*info)(const void* processor, int what);  // 0 vocab, 1 pad, 2 unk, 3 bos, 4 eos
  bool (*encode_pieces)(const void* processor, const std::string* text, std::vector<std::string>* pieces,
                        std::string* error);
  bool (*decode_pieces)(const void* processor, const std::vector<std::string>* pieces, std::string* text,
                        std::string* error);
  // The piece of `id` (false if out of range); *control: a control or unknown symbol.
  bool (*id_to_piece)(const void* processor, int id, std::string* piece, bool* control);
  // Up to `nbest` best segmentations, best first, with their log-probabilities (unigram models).
  bool (*nbest)(const void* processor, const std::string* text, int nbest, std::vector<std::vector<int>>* ids,
                std::vector<float>* scores, std::string* error);
  bool (*train)(const std::map<std::string, std::string>* flags, unsigned seed,
                bool (*next)(void*, std::string*), bool (*failed)(void*), void* ctx,
                std::string* model_proto, std::string* error);
};

// The loaded library, or null with *error naming every place searched.
const SpmLibrary* GetSpmLibrary(std::string* error);

}  // namespace tnmt
