// DecodeOptions defaults and validation; see options.h.
#include "engine/decode/options.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace tnmt {

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
  return absl::OkStatus();
}

}  // namespace tnmt
