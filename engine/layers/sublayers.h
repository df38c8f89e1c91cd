// Host building blocks of the CPU layer operations (cpu_layer_ops.h) that the trainer's CPU
// forward shares: a linear layer and the embedding lookup.
#pragma once

#include <cstdint>

#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace tnmt {

// y: [rows, out] = x: [rows, in] · W^T + b.
void ApplyLinear(float* y, const float* x, int64_t rows, const Linear& l);

// x: [count, d] = E[ids] * (sqrt(d) if scaled) + P[positions].
void Embed(float* x, const int32_t* ids, const int32_t* positions, int64_t count,
           const ModelConfig& c, const Tensor& table, const Tensor& pos);

}  // namespace tnmt
