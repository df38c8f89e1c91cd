// Tokenizer: text <-> token ids with the model's SentencePiece model (a joint vocabulary).
// Input must be valid UTF-8; anything else is an INVALID_ARGUMENT naming the byte offset.
// Thread-safe for concurrent Encode/Decode after Load.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/spm_backend.h"

namespace tnmt {

class Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);

  // Pieces of `text` (no </s> appended). Empty text gives no ids.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;

  int vocab_size() const { return backend_.vocab_size(); }
  int pad_id() const { return backend_.pad_id(); }
  int unk_id() const { return backend_.unk_id(); }
  int bos_id() const { return backend_.bos_id(); }
  int eos_id() const { return backend_.eos_id(); }

 private:
  Tokenizer() = default;
  SpmBackend backend_;
};

// OK if `text` is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF);
// otherwise INVALID_ARGUMENT with the offset of the first bad byte.
absl::Status ValidateUtf8(std::string_view text);

}  // namespace tnmt
