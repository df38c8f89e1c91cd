// Greedy and beam-search decoding of a batch of source sentences, exactly as specified in
// docs/model-format.md ("Beam search"). The encoder runs once per batch, cross-attention K/V
// once per source, self-attention K/V are cached and reordered by beam; sentences that finish
// leave the batch. A sentence's result does not depend on the other sentences in its batch.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/decode/options.h"
#include "engine/layers/workspace.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace tnmt {

// sources: token ids, each ending with eos_id, each non-empty and within the model's
// position limit; all ids in [0, vocab). Returns one result per source, in order.
absl::StatusOr<std::vector<DecodeResult>> Decode(const ModelConfig& c, const ModelWeights& w,
                                                 const std::vector<std::vector<int32_t>>& sources,
                                                 const DecodeOptions& options, Workspace* ws);

// Length penalty lp(n) = ((5 + n) / 6)^alpha.
double LengthPenalty(int length, double alpha);

}  // namespace tnmt
