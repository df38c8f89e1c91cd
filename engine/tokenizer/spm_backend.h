// Thin SentencePiece wrapper with a std-only interface, over the run-time loaded shim
// (spm_library.h): SentencePiece's headers clash with Debian's Abseil and its bundled protobuf
// with the system one, so no tnmt object but libtnmt_spm.so includes or links SentencePiece.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace tnmt {

class SpmBackend {
 public:
  SpmBackend();
  ~SpmBackend();
  // Returns false and sets *error on failure.
  bool Load(const std::string& path, std::string* error);
  bool Encode(const std::string& text, std::vector<int>* ids, std::string* error) const;
  bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const;
  bool EncodePieces(const std::string& text, std::vector<std::string>* pieces, std::string* error) const;
  // Up to `nbest` best segmentations, best first, with their log-probabilities.
  bool NBestEncode(const std::string& text, int nbest, std::vector<std::vector<int>>* ids,
                   std::vector<float>* scores, std::string* error) const;
  bool DecodePieces(const std::vector<std::string>& pieces, std::string* text, std::string* error) const;
  // False if `id` is outside the vocabulary; *control: a control or unknown symbol.
  bool IdToPiece(int id, std::string* piece, bool* control) const;
  int vocab_size() const;
  int pad_id() const;
  int unk_id() const;
  int bos_id() const;
  int eos_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tnmt
