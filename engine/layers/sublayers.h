// Building blocks shared by the encoder and decoder forward passes: linear layers,
// the feed-forward sub-layer and the residual + layer-norm wiring (post- or pre-norm).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/layers/workspace.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace tnmt {

// y: [rows, out] = x: [rows, in] · W^T + b.
void ApplyLinear(float* y, const float* x, int64_t rows, const Linear& l);

// Residual wiring of one sub-layer. Post-norm: x = LN(x + f). Pre-norm: x = x + f.
// `f` is the sub-layer output; x: [rows, d] is updated in place.
void FinishSublayer(float* x, const float* f, int64_t rows, const ModelConfig& c,
                    const LayerNormWeights& ln);

// Input of a sub-layer: x itself (post-norm) or LN(x) written to `scratch` (pre-norm).
const float* SublayerInput(const float* x, float* scratch, int64_t rows, const ModelConfig& c,
                           const LayerNormWeights& ln);

// Feed-forward sub-layer, with its residual: x = wire(x, fc2(act(fc1(in(x))))).
absl::Status FeedForward(float* x, int64_t rows, const ModelConfig& c, const Linear& fc1,
                         const Linear& fc2, const LayerNormWeights& ln, Workspace* ws);

// x: [count, d] = E[ids] * (sqrt(d) if scaled) + P[positions].
void Embed(float* x, const int32_t* ids, const int32_t* positions, int64_t count,
           const ModelConfig& c, const Tensor& table, const Tensor& pos);

}  // namespace tnmt
