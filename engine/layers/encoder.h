// Transformer encoder forward pass over a padded batch of sentences.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/layers/workspace.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace tnmt {

// ids: [batch, max_len] (row b valid for lengths[b] tokens, rest padding; lengths[b] >= 1).
// Returns the encoder output of the valid positions only, sentence after sentence:
// [lengths[0] + ... + lengths[batch - 1], d_model] (row offsets[b] + j is position j of
// sentence b, offsets the running sums of lengths). No padding position is computed; each
// valid row is bit for bit that of Encode.
absl::StatusOr<Tensor> EncodeRows(const ModelConfig& c, const ModelWeights& w, const int32_t* ids,
                                  const int32_t* lengths, int batch, int max_len, Workspace* ws);

// As EncodeRows, laid out as the padded batch: [batch, max_len, d_model]; padded rows hold
// unspecified values.
absl::StatusOr<Tensor> Encode(const ModelConfig& c, const ModelWeights& w, const int32_t* ids,
                              const int32_t* lengths, int batch, int max_len, Workspace* ws);

}  // namespace tnmt
