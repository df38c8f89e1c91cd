// Trainable parameters as views over ModelWeights: the same structure holds parameters,
// gradients and Adam moments, so checkpoints reuse the model format's tensor names.
// The trained tensors are those of the model tree (engine/model/param_tree.h), in its order:
// shared embeddings are one tensor (listed once); the sinusoidal table and the logits bias are
// not parameters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace tnmt::train {

// Where a trained tensor sits in the model tree: a model-level table (`table`), or a layer's
// group or a stack's final layer norm (`site`).
struct TensorAt {
  std::string name;  // fused layout name, e.g. "decoder.layers.0.self_attn.qkv.weight"
  const TableInfo* table = nullptr;
  Site site{Stack::kEncoder};
};

// Calls f(at, tensor...) for every trained tensor of the model tree of `c`, in the tree's order
// (weight before bias, gamma before beta), in step over the tensor-level fields of each of `m`
// (ModelWeights: Tensors; train::FlatModel: offsets).
template <class F, class... M>
void VisitTrained(const ModelConfig& c, F&& f, M&... m) {
  VisitModel(MakeModelVisitor(
                 [&](const TableInfo& t, auto&... x) {
                   if (t.trained()) f(TensorAt{t.name, &t, Site{Stack::kEncoder}}, x...);
                 },
                 [&](const Site& s, const LinearGroup& g, auto&... l) {
                   const std::string p = s.Name(g.name);
                   f(TensorAt{p + ".weight", nullptr, s}, l.weight...);
                   f(TensorAt{p + ".bias", nullptr, s}, l.bias...);
                 },
                 [&](const Site& s, const char* name, auto&... n) {
                   const std::string p = s.Name(name);
                   f(TensorAt{p + ".weight", nullptr, s}, n.gamma...);
                   f(TensorAt{p + ".bias", nullptr, s}, n.beta...);
                 }),
             c, m...);
}

struct ParamRef {
  std::string name;  // fused layout name, e.g. "decoder.layers.0.self_attn.qkv.weight"
  Tensor* tensor;
};

// The unique trainable tensors of `w`, in a fixed order that is the same for any two
// ModelWeights built from the same config (so params, grads and moments line up).
std::vector<ParamRef> TrainableParams(const ModelConfig& c, ModelWeights* w);

// Zeros with the same shapes and the same sharing as `w`.
absl::StatusOr<ModelWeights> ZerosLike(const ModelConfig& c, const ModelWeights& w);

// Fresh parameters, each by its kind in the model tree, in the tree's order: Xavier-uniform
// linears (a fused group by blocks) with zero biases, N(0, d^-1/2) embeddings and output
// projection with a zero pad row, learned positions N(0, d^-1/2), layer norms 1 and 0, a logits
// bias 0. Deterministic from `seed`.
absl::StatusOr<ModelWeights> InitializeWeights(const ModelConfig& c, uint64_t seed);

// Sets every unique tensor of `w` to zero.
void ZeroAll(const ModelConfig& c, ModelWeights* w);

int64_t ParameterCount(const ModelConfig& c, ModelWeights* w);

}  // namespace tnmt::train
