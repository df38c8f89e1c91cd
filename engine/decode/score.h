// Forced decoding: the log-probability a model gives a given target for a given source, token
// by token (the target's tokens, then </s>), with the same encoder, KV cache and log-softmax as
// decoding. What `tnmt score` and the Score RPC return; also how to check a translation's score.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/decode/step_model.h"
#include "engine/model/config.h"

namespace tnmt {

struct PairScore {
  float score = 0.0f;               // sum of token_scores
  std::vector<float> token_scores;  // log p(token | source, earlier tokens), one per target token, then </s>
};

// sources: token ids ending with eos_id; targets: token ids without eos_id (which is scored
// after them). The decoder starts from the config's start token. Every source must have at most
// MaxPositions tokens and every target fewer than MaxPositions. `model` must be empty (no rows);
// it is empty again afterwards.
absl::StatusOr<std::vector<PairScore>> ScoreBatch(const ModelConfig& c, StepModel* model,
                                                  const std::vector<std::vector<int32_t>>& sources,
                                                  const std::vector<std::vector<int32_t>>& targets);

}  // namespace tnmt
