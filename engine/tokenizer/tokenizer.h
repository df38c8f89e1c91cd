// Tokenizer: text <-> token ids. Two layouts (docs/model-format.md, "Vocabulary"):
//   joint     one SentencePiece model whose ids are the model's ids (source and target);
//   separate  a SentencePiece model for the source and one for the target, and a JSON object
//             mapping every piece to the model's id (OPUS-MT / Hugging Face Marian). A source
//             text may start with a language code `>>xx<<`, which is one token; pieces not in
//             the map are `<unk>`; decoding drops `</s>`, `<pad>` and `<unk>`, turns every
//             U+2581 left after SentencePiece (a piece of the map that target.spm lacks keeps
//             its mark) into a space and trims spaces, as MarianTokenizer.decode(..., skip_special_tokens=True,
//             clean_up_tokenization_spaces=False) does.
// Input must be valid UTF-8; anything else is an INVALID_ARGUMENT naming the byte offset.
// Thread-safe for concurrent Encode/Decode after Load.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/spm_backend.h"

namespace tnmt {

class Tokenizer {
 public:
  // Joint vocabulary: one SentencePiece model.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);
  // Separate vocabularies; `ids_path` is a JSON object {piece: id} with ids 0..n-1, each once,
  // holding at least "</s>" and "<unk>". Errors name the file and the problem.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSeparate(const std::string& source_spm,
                                                                 const std::string& target_spm,
                                                                 const std::string& ids_path);

  // Source pieces of `text` (no </s> appended). Empty text gives no ids.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;
  // Target pieces of `text` (no </s>): what Decode would turn back into `text`.
  absl::StatusOr<std::vector<int32_t>> EncodeTarget(std::string_view text) const;
  // Joint vocabularies (unigram models) only: up to `nbest` (>= 1) segmentations of `text`,
  // best first, with their log-probabilities; the first is Encode's. For subword sampling.
  struct Segmentation {
    std::vector<int32_t> ids;
    float log_prob = 0.0f;
  };
  // Texts of more than kNBestMaxPieces pieces, and nbest above kNBestMax, get only the best.
  static constexpr size_t kNBestMaxPieces = 128;
  static constexpr int kNBestMax = 64;
  absl::StatusOr<std::vector<Segmentation>> EncodeNBest(std::string_view text, int nbest) const;
  // Target text of `ids`.
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;

  bool separate() const { return separate_; }
  int vocab_size() const { return separate_ ? static_cast<int>(pieces_.size()) : source_.vocab_size(); }
  // Special ids; -1 when the vocabulary has no such piece.
  int pad_id() const { return separate_ ? Find("<pad>") : source_.pad_id(); }
  int unk_id() const { return separate_ ? Find("<unk>") : source_.unk_id(); }
  int bos_id() const { return separate_ ? Find("<s>") : source_.bos_id(); }
  int eos_id() const { return separate_ ? Find("</s>") : source_.eos_id(); }
  // The piece of a model id (joint: SentencePiece's piece); empty if out of range.
  std::string Piece(int id) const;

 private:
  Tokenizer() = default;
  int Find(const std::string& piece) const;
  // Separate vocabularies: the ids of `spm`'s pieces of `text` (<unk> for a piece not in the map).
  absl::Status AppendPieceIds(const SpmBackend& spm, const std::string& text, std::vector<int32_t>* out) const;

  bool separate_ = false;
  SpmBackend source_;  // the joint model when !separate_
  SpmBackend target_;
  std::unordered_map<std::string, int32_t> ids_;  // separate: piece -> id
  std::vector<std::string> pieces_;               // separate: id -> piece
};

// OK if `text` is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF);
// otherwise INVALID_ARGUMENT with the offset of the first bad byte.
absl::Status ValidateUtf8(std::string_view text);

}  // namespace tnmt
