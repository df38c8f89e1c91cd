// Trainable parameter views, zero copies and initialization; see parameters.h.
#include "trainer/model/parameters.h"

#include <cmath>
#include <cstring>
#include <random>

#include "engine/core/status_macros.h"

namespace tnmt::train {

std::vector<ParamRef> TrainableParams(const ModelConfig& c, ModelWeights* w) {
  std::vector<ParamRef> out;
  VisitTrained(c, [&out](const TensorAt& at, Tensor& t) { out.push_back({at.name, &t}); }, *w);
  return out;
}

absl::StatusOr<ModelWeights> ZerosLike(const ModelConfig& c, const ModelWeights& w) {
  TensorMap zeros;
  for (const auto& [name, t] : w.ToTensors(c)) {
    TNMT_ASSIGN_OR_RETURN(Tensor z, Tensor::Zeros(t.shape()));
    zeros.emplace(name, StoredTensor{std::move(z), DType::kFloat32});
  }
  return ModelWeights::Build(c, std::move(zeros), "zeros");
}

void ZeroAll(const ModelConfig& c, ModelWeights* w) {
  for (ParamRef& p : TrainableParams(c, w)) {
    std::memset(p.tensor->f32(), 0, sizeof(float) * p.tensor->numel());
  }
}

int64_t ParameterCount(const ModelConfig& c, ModelWeights* w) {
  int64_t n = 0;
  for (ParamRef& p : TrainableParams(c, w)) n += p.tensor->numel();
  return n;
}

absl::StatusOr<ModelWeights> InitializeWeights(const ModelConfig& c, uint64_t seed) {
  TNMT_ASSIGN_OR_RETURN(ModelWeights w, ModelWeights::Zeros(c));
  std::mt19937_64 rng(seed);
  auto normal = [&rng, &c](Tensor& t) {
    std::normal_distribution<float> dist(0.0f, 1.0f / std::sqrt(static_cast<float>(c.d_model)));
    float* x = t.f32();
    for (int64_t i = 0; i < t.numel(); ++i) x[i] = dist(rng);
  };
  VisitModel(MakeModelVisitor(
                 [&](const TableInfo& t, Tensor& x) {
                   switch (t.kind) {
                     case TableKind::kEmbedding:
                       normal(x);
                       std::memset(x.f32() + static_cast<int64_t>(c.pad_id) * c.d_model, 0,
                                   sizeof(float) * c.d_model);
                       break;
                     case TableKind::kPositions:
                       normal(x);
                       break;
                     case TableKind::kSinusoid:  // computed
                     case TableKind::kBias:      // zeros
                       break;
                   }
                 },
                 [&](const Site&, const LinearGroup& g, Linear& l) {
                   // weight: [fused * block, in], each of the fused projections its own
                   // Xavier-uniform [block, in] matrix; the bias stays zero.
                   const int64_t in = l.weight.dim(1), block = l.weight.dim(0) / g.fused;
                   const float limit = std::sqrt(6.0f / static_cast<float>(block + in));
                   std::uniform_real_distribution<float> dist(-limit, limit);
                   float* x = l.weight.f32();
                   for (int64_t i = 0; i < l.weight.numel(); ++i) x[i] = dist(rng);
                 },
                 [](const Site&, const char*, LayerNormWeights& ln) {
                   float* gamma = ln.gamma.f32();
                   for (int64_t i = 0; i < ln.gamma.numel(); ++i) gamma[i] = 1.0f;
                 }),
             c, w);
  return w;
}

}  // namespace tnmt::train
