// Transformer encoder forward pass over a padded batch.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/layers/workspace.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace tnmt {

// ids: [batch, max_len] (row b valid for lengths[b] tokens, rest padding; lengths[b] >= 1).
// Returns the encoder output [batch, max_len, d_model]; padded rows hold unspecified values
// and never influence valid rows (padding is masked as keys).
absl::StatusOr<Tensor> Encode(const ModelConfig& c, const ModelWeights& w, const int32_t* ids,
                              const int32_t* lengths, int batch, int max_len, Workspace* ws);

}  // namespace tnmt
