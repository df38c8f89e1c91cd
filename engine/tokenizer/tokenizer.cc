// Tokenizer over SpmBackend plus strict UTF-8 validation; see tokenizer.h.
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/core/json_limits.h"

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
  if (!t->source_.Load(path, &error)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot load SentencePiece model: ", error));
  }
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadSeparate(const std::string& source_spm,
                                                                   const std::string& target_spm,
                                                                   const std::string& ids_path) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->separate_ = true;
  std::string error;
  for (auto [path, backend] : {std::pair<const std::string*, SpmBackend*>{&source_spm, &t->source_},
                               {&target_spm, &t->target_}}) {
    if (!backend->Load(*path, &error)) {
      return absl::InvalidArgumentError(absl::StrCat(*path, ": cannot load SentencePiece model: ", error));
    }
  }
  std::ifstream in(ids_path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(ids_path, ": cannot open (missing or unreadable)"));
  std::stringstream ss;
  ss << in.rdbuf();
  if (absl::Status s = CheckJsonLimits(ss.str(), ids_path); !s.ok()) return s;
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& what) { return absl::InvalidArgumentError(absl::StrCat(ids_path, ": ", what)); };
  if (j.is_discarded()) return bad("not valid JSON");
  if (!j.is_object() || j.empty()) return bad("must be a non-empty JSON object {piece: id}");
  t->pieces_.assign(j.size(), std::string());
  std::vector<bool> seen(j.size(), false);
  for (const auto& [piece, id] : j.items()) {
    if (!id.is_number_integer()) return bad(absl::StrCat("the id of \"", piece.substr(0, 64), "\" is not an integer"));
    const int64_t v = id.get<int64_t>();
    if (v < 0 || v >= static_cast<int64_t>(j.size())) {
      return bad(absl::StrCat("id ", v, " of \"", piece.substr(0, 64), "\" is outside [0, ", j.size(),
                              ") (ids must be 0..n-1, each once)"));
    }
    if (seen[v]) return bad(absl::StrCat("id ", v, " is given to more than one piece"));
    seen[v] = true;
    t->pieces_[v] = piece;
    t->ids_.emplace(piece, static_cast<int32_t>(v));
  }
  for (const char* needed : {"</s>", "<unk>"}) {
    if (t->Find(needed) < 0) return bad(absl::StrCat("has no \"", needed, "\""));
  }
  return t;
}

int Tokenizer::Find(const std::string& piece) const {
  auto it = ids_.find(piece);
  return it == ids_.end() ? -1 : it->second;
}

std::string Tokenizer::Piece(int id) const {
  if (separate_) return id >= 0 && id < static_cast<int>(pieces_.size()) ? pieces_[id] : std::string();
  std::string piece;
  bool control = false;
  return source_.IdToPiece(id, &piece, &control) ? piece : std::string();
}

absl::StatusOr<std::vector<Tokenizer::Segmentation>> Tokenizer::EncodeNBest(std::string_view text,
                                                                            int nbest) const {
  if (separate_) {
    return absl::FailedPreconditionError("n-best segmentation needs a joint SentencePiece vocabulary");
  }
  if (nbest < 1) return absl::InvalidArgumentError(absl::StrCat("n-best size ", nbest, " (must be >= 1)"));
  absl::StatusOr<std::vector<int32_t>> best = Encode(text);
  if (!best.ok()) return best.status();
  // SentencePiece's n-best search keeps an agenda that grows with the length; past its bound it
  // logs (which crashes inside the shim) and prunes. Long texts keep their best segmentation.
  if (best->size() > kNBestMaxPieces) return std::vector<Segmentation>{{*std::move(best), 0.0f}};
  std::vector<std::vector<int>> ids;
  std::vector<float> scores;
  std::string error;
  if (!source_.NBestEncode(std::string(text), std::min(nbest, kNBestMax), &ids, &scores, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("n-best tokenization failed: ", error));
  }
  std::vector<Segmentation> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    out.push_back({std::vector<int32_t>(ids[i].begin(), ids[i].end()), i < scores.size() ? scores[i] : 0.0f});
  }
  if (out.empty()) out.push_back({{}, 0.0f});  // empty text: one empty segmentation
  return out;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text) const {
  absl::Status utf8 = ValidateUtf8(text);
  if (!utf8.ok()) return utf8;
  std::string error;
  if (!separate_) {
    std::vector<int> ids;
    if (!source_.Encode(std::string(text), &ids, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("tokenization failed: ", error));
    }
    return std::vector<int32_t>(ids.begin(), ids.end());
  }
  // A language code: the span from the first ">>" to the last "<<" (at least one character
  // between) is cut out of the text; when it starts the text it is the first token.
  std::string rest(text);
  std::vector<int32_t> out;
  const int32_t unk = static_cast<int32_t>(unk_id());
  const size_t open = rest.find(">>");
  const size_t close = rest.rfind("<<");
  if (open != std::string::npos && close != std::string::npos && close >= open + 3) {
    if (open == 0) {
      const int code = Find(rest.substr(0, close + 2));
      out.push_back(code >= 0 ? code : unk);
    }
    rest.erase(open, close + 2 - open);
  }
  if (absl::Status s = AppendPieceIds(source_, rest, &out); !s.ok()) return s;
  return out;
}

absl::Status Tokenizer::AppendPieceIds(const SpmBackend& spm, const std::string& text,
                                       std::vector<int32_t>* out) const {
  std::vector<std::string> pieces;
  std::string error;
  if (!spm.EncodePieces(text, &pieces, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("tokenization failed: ", error));
  }
  const int32_t unk = static_cast<int32_t>(unk_id());
  for (const std::string& p : pieces) {
    const int id = Find(p);
    out->push_back(id >= 0 ? id : unk);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::EncodeTarget(std::string_view text) const {
  if (!separate_) return Encode(text);
  absl::Status utf8 = ValidateUtf8(text);
  if (!utf8.ok()) return utf8;
  std::vector<int32_t> out;
  if (absl::Status s = AppendPieceIds(target_, std::string(text), &out); !s.ok()) return s;
  return out;
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text, error;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " outside the vocabulary"));
    }
  }
  if (!separate_) {
    if (!source_.Decode(std::vector<int>(ids.begin(), ids.end()), &text, &error)) {
      return absl::InternalError(absl::StrCat("detokenization failed: ", error));
    }
    return text;
  }
  const int skip[] = {eos_id(), pad_id(), unk_id()};
  std::vector<std::string> pieces;
  for (int32_t id : ids) {
    if (id == skip[0] || id == skip[1] || id == skip[2]) continue;
    pieces.push_back(pieces_[id]);
  }
  if (!target_.DecodePieces(pieces, &text, &error)) {
    return absl::InternalError(absl::StrCat("detokenization failed: ", error));
  }
  // SentencePiece passes a piece it does not know (one that only the id map has) through
  // unchanged, word-boundary mark included; MarianTokenizer turns every remaining U+2581 into
  // a space after decoding, and so does this.
  text = absl::StrReplaceAll(text, {{"\xe2\x96\x81", " "}});
  const size_t b = text.find_first_not_of(' ');
  if (b == std::string::npos) return std::string();
  return text.substr(b, text.find_last_not_of(' ') - b + 1);
}

}  // namespace tnmt
