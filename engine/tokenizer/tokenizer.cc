// Tokenizer over SpmBackend plus strict UTF-8 validation; see tokenizer.h.
#include "engine/tokenizer/tokenizer.h"

#include "absl/strings/str_cat.h"

namespace tnmt {

absl::Status ValidateUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    int len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("invalid UTF-8 at byte ", i));
    }
    if (i + len > n) return absl::InvalidArgumentError(absl::StrCat("truncated UTF-8 sequence at byte ", i));
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) {
        return absl::InvalidArgumentError(absl::StrCat("invalid UTF-8 at byte ", i));
      }
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return absl::InvalidArgumentError(absl::StrCat("invalid UTF-8 code point at byte ", i));
    }
    i += len;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  std::string error;
  if (!t->backend_.Load(path, &error)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot load SentencePiece model: ", error));
  }
  return t;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text) const {
  absl::Status utf8 = ValidateUtf8(text);
  if (!utf8.ok()) return utf8;
  std::vector<int> ids;
  std::string error;
  if (!backend_.Encode(std::string(text), &ids, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("tokenization failed: ", error));
  }
  return std::vector<int32_t>(ids.begin(), ids.end());
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text, error;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " outside the vocabulary"));
    }
  }
  if (!backend_.Decode(std::vector<int>(ids.begin(), ids.end()), &text, &error)) {
    return absl::InternalError(absl::StrCat("detokenization failed: ", error));
  }
  return text;
}

}  // namespace tnmt
