// ModelConfig: the parsed config.json of a model directory (docs/model-format.md, version 1).
// Every field has the documented default; Parse validates ranges and names the bad key.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kernels/cpu/elementwise.h"

namespace tnmt {

enum class PositionEncoding { kSinusoidal, kLearned };

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
  static constexpr int kFormatVersion = 1;

  int vocab_size = 0;
  int d_model = 512;
  int num_heads = 8;
  int d_ff = 2048;
  int encoder_layers = 6;
  int decoder_layers = 6;
  bool normalize_before = false;
  kernels::cpu::Activation activation = kernels::cpu::Activation::kRelu;
  PositionEncoding position_encoding = PositionEncoding::kSinusoidal;
  int max_positions = 1024;
  bool share_embeddings = true;
  bool share_decoder_input_output_embed = true;
  bool scale_embedding = true;
  float layer_norm_epsilon = 1e-6f;
  int pad_id = 0;
  int unk_id = 1;
  int bos_id = 2;
  int eos_id = 3;
  float label_smoothing = 0.1f;
  DecodingDefaults decoding;

  int d_head() const { return d_model / num_heads; }

  // Parses and validates JSON text; `source` names the file in error messages.
  static absl::StatusOr<ModelConfig> Parse(const std::string& json_text, const std::string& source);
  static absl::StatusOr<ModelConfig> Load(const std::string& path);
  // Serializes every key (used by the trainer and by tests).
  std::string ToJson() const;
};

}  // namespace tnmt
