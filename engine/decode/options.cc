// DecodeOptions defaults and validation; see options.h.
#include "engine/decode/options.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "engine/model/weights.h"

namespace tnmt {

int MaxOutputLength(const DecodeOptions& o, int source_length, const ModelConfig& c) {
  const int max_len = o.max_length > 0 ? o.max_length : std::max(source_length + o.max_length_offset, o.min_length);
  return std::max(1, std::min(max_len, MaxPositions(c)));
}

uint64_t DrawSeed() {
  std::random_device device;
  uint64_t seed = 0;
  while (seed == 0) seed = (static_cast<uint64_t>(device()) << 32) ^ device();
  return seed;
}

DecodeOptions DecodeOptions::FromConfig(const ModelConfig& c) {
  DecodeOptions o;
  o.beam_size = c.decoding.beam_size;
  o.length_penalty = c.decoding.length_penalty;
  o.length_penalty_style = c.decoding.length_penalty_style;
  o.max_length_offset = c.decoding.max_length_offset;
  return o;
}

absl::Status DecodeOptions::Validate() const {
  if (beam_size < 1 || beam_size > kMaxBeamSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("beam_size must be in [1, ", kMaxBeamSize, "], got ", beam_size));
  }
  if (n_best < 1 || n_best > beam_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_best must be in [1, beam_size=", beam_size, "], got ", n_best));
  }
  if (!std::isfinite(length_penalty) || std::fabs(length_penalty) > 10.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("length_penalty must be a finite number in [-10, 10], got ", length_penalty));
  }
  if (max_length_offset < 0 || max_length_offset > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_length_offset must be in [0, 10000], got ", max_length_offset));
  }
  if (max_length < 0 || max_length > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_length must be in [0, 10000], got ", max_length));
  }
  if (min_length < 0 || (max_length > 0 && min_length > max_length)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_length must be in [0, max_length], got ", min_length));
  }
  if (no_repeat_ngram_size < 0 || no_repeat_ngram_size > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("no_repeat_ngram_size must be in [0, 64], got ", no_repeat_ngram_size));
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f || repetition_penalty > 100.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be in (0, 100], got ", repetition_penalty));
  }
  if (sampling_topk < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sampling_topk must be >= 0, got ", sampling_topk));
  }
  if (!std::isfinite(sampling_topp) || sampling_topp <= 0.0f || sampling_topp > 1.0f) {
    return absl::InvalidArgumentError(absl::StrCat("sampling_topp must be in (0, 1], got ", sampling_topp));
  }
  if (!std::isfinite(sampling_temperature) || sampling_temperature <= 0.0f || sampling_temperature > 100.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling_temperature must be in (0, 100], got ", sampling_temperature));
  }
  if (!sampling() && (sampling_topp != 1.0f || sampling_temperature != 1.0f)) {
    return absl::InvalidArgumentError(
        "sampling_topp and sampling_temperature apply to sampling only: set sampling_topk (0: all tokens)");
  }
  if (sampling() && beam_size != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling needs beam_size 1, got ", beam_size, " (sampling_topk ", sampling_topk, ")"));
  }
  if (alignment_layer < -1) {
    return absl::InvalidArgumentError(absl::StrCat("alignment_layer must be >= -1, got ", alignment_layer));
  }
  return absl::OkStatus();
}

}  // namespace tnmt
