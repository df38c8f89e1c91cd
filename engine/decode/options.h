// Decoding options and results shared by greedy and beam search.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/config.h"

namespace tnmt {

struct DecodeOptions {
  int beam_size = 4;            // 1 = greedy decoding
  float length_penalty = 0.6f;  // α in lp(n) = ((5 + n) / 6)^α (or n^α); beam search only
  LengthPenaltyStyle length_penalty_style = LengthPenaltyStyle::kGnmt;  // which lp(n)
  int max_length_offset = 50;   // max output length = input length + offset
  int max_length = 0;           // if > 0: max output length, replacing the offset rule
  int min_length = 0;           // </s> may not be chosen before output position min_length
  int n_best = 1;               // hypotheses returned per sentence (<= beam_size)

  // Options from the model's config.json defaults.
  static DecodeOptions FromConfig(const ModelConfig& c);
  // Checks ranges; the message names the option.
  absl::Status Validate() const;
};

struct Hypothesis {
  std::vector<int32_t> ids;  // generated tokens without </s>
  float score = 0.0f;        // beam: normalized log-probability; greedy: sum of log-probs
};

struct DecodeResult {
  std::vector<Hypothesis> hypotheses;  // best first, at most n_best
};

// Largest beam accepted (memory grows with it).
constexpr int kMaxBeamSize = 64;

}  // namespace tnmt
