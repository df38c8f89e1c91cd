// Thin SentencePiece wrapper with a std-only interface. SentencePiece's header declares
// `absl::string_view` itself, which clashes with Debian's Abseil, so sentencepiece is only
// ever included from spm_backend.cc, which includes no Abseil header.
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
