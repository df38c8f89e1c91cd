// Trainable parameters as views over ModelWeights: the same structure holds parameters,
// gradients and Adam moments, so checkpoints reuse the model format's tensor names.
// Shared embeddings are one tensor (listed once); the sinusoidal table is not a parameter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace tnmt::train {

struct ParamRef {
  std::string name;  // fused layout name, e.g. "decoder.layers.0.self_attn.qkv.weight"
  Tensor* tensor;
};

// The unique trainable tensors of `w`, in a fixed order that is the same for any two
// ModelWeights built from the same config (so params, grads and moments line up).
std::vector<ParamRef> TrainableParams(const ModelConfig& c, ModelWeights* w);

// Zeros with the same shapes and the same sharing as `w`.
absl::StatusOr<ModelWeights> ZerosLike(const ModelConfig& c, const ModelWeights& w);

// Fresh parameters: Xavier-uniform linears with zero biases, N(0, d^-1/2) embeddings with a zero
// pad row, layer norms 1 and 0, learned positions N(0, d^-1/2). Deterministic from `seed`.
absl::StatusOr<ModelWeights> InitializeWeights(const ModelConfig& c, uint64_t seed);

// Sets every unique tensor of `w` to zero.
void ZeroAll(const ModelConfig& c, ModelWeights* w);

int64_t ParameterCount(const ModelConfig& c, ModelWeights* w);

}  // namespace tnmt::train
