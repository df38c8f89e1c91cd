// DecodeOptions defaults and validation; see options.h.
#include "engine/decode/options.h"

#include <algorithm>
#include <random>

#include "engine/decode/option_table.h"
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

absl::Status DecodeOptions::Validate() const { return ValidateDecodeOptions(*this, OptionTerms::kEngine); }

}  // namespace tnmt
