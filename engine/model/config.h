// ModelConfig: the parsed config.json of a model directory (docs/model-format.md, versions 1
// and 2; version 2 adds separate source/target vocabularies, language codes, a final logits
// bias, Marian's sinusoid layout, more activations and a decoder start token).
// Every field has the documented default; Parse validates ranges and names the bad key.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kernels/activation.h"

namespace tnmt {

enum class PositionEncoding { kSinusoidal, kLearned };

// Where the sines and cosines of the sinusoidal positions go: kInterleaved as the paper's
// formula (sin at 2i, cos at 2i+1), kHalves as Marian (sin in [0, d/2), cos in [d/2, d)).
enum class SinusoidLayout { kInterleaved, kHalves };

// The files of a model's vocabulary. Joint (version 1): one SentencePiece model whose ids are
// the model's ids. Separate (version 2): SentencePiece models for source and target text and a
// JSON object mapping each piece to the model's id (OPUS-MT's layout).
struct VocabularyFiles {
  std::string joint_spm = "spm.model";
  std::string source_spm;  // non-empty: separate vocabularies
  std::string target_spm;
  std::string ids;  // e.g. "vocab.json"
  bool separate() const { return !source_spm.empty(); }
};

// How beam search normalizes a finished hypothesis' log-probability by its length n (</s>
// included): kGnmt divides by ((5 + n) / 6)^alpha (the paper's and tensor2tensor's), kLength
// by n^alpha (Hugging Face, fairseq and CTranslate2's).
enum class LengthPenaltyStyle { kGnmt, kLength };
// "gnmt" / "length", and back (InvalidArgument naming the accepted values).
const char* LengthPenaltyStyleName(LengthPenaltyStyle s);
absl::StatusOr<LengthPenaltyStyle> ParseLengthPenaltyStyle(const std::string& name);

struct DecodingDefaults {
  int beam_size = 4;
  float length_penalty = 0.6f;
  LengthPenaltyStyle length_penalty_style = LengthPenaltyStyle::kGnmt;
  int max_length_offset = 50;
};

struct ModelConfig {
  static constexpr const char* kFormat = "tnmt-transformer";
  static constexpr int kFormatVersion = 2;  // the newest version this reader knows

  int vocab_size = 0;
  int d_model = 512;
  int num_heads = 8;
  int d_ff = 2048;
  int encoder_layers = 6;
  int decoder_layers = 6;
  bool normalize_before = false;
  kernels::Activation activation = kernels::Activation::kRelu;
  PositionEncoding position_encoding = PositionEncoding::kSinusoidal;
  SinusoidLayout sinusoid_layout = SinusoidLayout::kInterleaved;
  int max_positions = 1024;
  // Longest sequence sinusoidal positions allow (Marian: max_position_embeddings); 0 = 4096.
  int max_sinusoid_positions = 0;
  bool share_embeddings = true;
  bool share_decoder_input_output_embed = true;
  bool scale_embedding = true;
  float layer_norm_epsilon = 1e-6f;
  int pad_id = 0;
  int unk_id = 1;
  int bos_id = 2;
  int eos_id = 3;
  int decoder_start_id = -1;  // first decoder input; -1 in the file means bos_id (resolved by Parse)
  bool final_logits_bias = false;  // tensor final_logits_bias [vocab] added to the logits
  VocabularyFiles vocabulary;
  std::string source_language;  // e.g. "en"; empty when unknown
  std::string target_language;
  float label_smoothing = 0.1f;
  DecodingDefaults decoding;

  int d_head() const { return d_model / num_heads; }
  int start_id() const { return decoder_start_id >= 0 ? decoder_start_id : bos_id; }
  // True when the model uses anything format version 1 cannot say (ToJson then writes 2).
  bool NeedsVersion2() const;

  // Parses and validates JSON text; `source` names the file in error messages.
  static absl::StatusOr<ModelConfig> Parse(const std::string& json_text, const std::string& source);
  static absl::StatusOr<ModelConfig> Load(const std::string& path);
  // OK if the CUDA engine and trainer can run this model; otherwise FAILED_PRECONDITION naming
  // the config.json key they do not support (activation, sinusoid_layout, final_logits_bias).
  absl::Status CheckCudaSupport() const;
  // Serializes every key (used by the trainer and by tests).
  std::string ToJson() const;
};

}  // namespace tnmt
