// Trainable parameter views, zero copies and initialization; see parameters.h.
#include "trainer/model/parameters.h"

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace tnmt::train {

std::vector<ParamRef> TrainableParams(const ModelConfig& c, ModelWeights* w) {
  std::vector<ParamRef> out;
  std::set<const void*> seen;
  auto add = [&](const std::string& name, Tensor* t) {
    if (t->empty() || !seen.insert(t->data<void>()).second) return;
    out.push_back({name, t});
  };
  auto linear = [&](const std::string& p, Linear* l) {
    add(p + ".weight", &l->weight);
    add(p + ".bias", &l->bias);
  };
  auto ln = [&](const std::string& p, LayerNormWeights* l) {
    add(p + ".weight", &l->gamma);
    add(p + ".bias", &l->beta);
  };
  add("encoder.embed_tokens.weight", &w->encoder_embed);
  add("decoder.embed_tokens.weight", &w->decoder_embed);
  add("decoder.output_projection.weight", &w->output_projection);
  if (c.position_encoding == PositionEncoding::kLearned) {
    add("encoder.embed_positions.weight", &w->encoder_positions);
    add("decoder.embed_positions.weight", &w->decoder_positions);
  }
  auto layer = [&](const std::string& p) {
    return MakeParamVisitor([&, p](const LinearGroup& g, Linear& l) { linear(p + "." + g.name, &l); },
                            [&, p](const char* name, LayerNormWeights& l) { ln(p + "." + name, &l); });
  };
  for (size_t i = 0; i < w->encoder.size(); ++i) {
    VisitEncoderLayer(layer(absl::StrCat("encoder.layers.", i)), w->encoder[i]);
  }
  for (size_t i = 0; i < w->decoder.size(); ++i) {
    VisitDecoderLayer(layer(absl::StrCat("decoder.layers.", i)), w->decoder[i]);
  }
  if (c.normalize_before) {
    ln("encoder.layer_norm", &w->encoder_final_ln);
    ln("decoder.layer_norm", &w->decoder_final_ln);
  }
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
  // Build a zero model with the right structure, then fill each tensor by its role.
  ModelWeights zero_model;
  {
    TensorMap zeros;
    auto add = [&](const std::string& name, std::vector<int64_t> shape) -> absl::Status {
      TNMT_ASSIGN_OR_RETURN(Tensor z, Tensor::Zeros(std::move(shape)));
      zeros.emplace(name, StoredTensor{std::move(z), DType::kFloat32});
      return absl::OkStatus();
    };
    const int64_t d = c.d_model, v = c.vocab_size, ff = c.d_ff;
    TNMT_RETURN_IF_ERROR(add("encoder.embed_tokens.weight", {v, d}));
    if (!c.share_embeddings) TNMT_RETURN_IF_ERROR(add("decoder.embed_tokens.weight", {v, d}));
    if (!c.share_decoder_input_output_embed) {
      TNMT_RETURN_IF_ERROR(add("decoder.output_projection.weight", {v, d}));
    }
    if (c.position_encoding == PositionEncoding::kLearned) {
      TNMT_RETURN_IF_ERROR(add("encoder.embed_positions.weight", {c.max_positions, d}));
      TNMT_RETURN_IF_ERROR(add("decoder.embed_positions.weight", {c.max_positions, d}));
    }
    auto attn = [&](const std::string& p) -> absl::Status {
      for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
        TNMT_RETURN_IF_ERROR(add(absl::StrCat(p, ".", proj, ".weight"), {d, d}));
        TNMT_RETURN_IF_ERROR(add(absl::StrCat(p, ".", proj, ".bias"), {d}));
      }
      return absl::OkStatus();
    };
    auto ln = [&](const std::string& p) -> absl::Status {
      TNMT_RETURN_IF_ERROR(add(p + ".weight", {d}));
      return add(p + ".bias", {d});
    };
    auto ffn = [&](const std::string& p) -> absl::Status {
      TNMT_RETURN_IF_ERROR(add(p + ".fc1.weight", {ff, d}));
      TNMT_RETURN_IF_ERROR(add(p + ".fc1.bias", {ff}));
      TNMT_RETURN_IF_ERROR(add(p + ".fc2.weight", {d, ff}));
      TNMT_RETURN_IF_ERROR(add(p + ".fc2.bias", {d}));
      return ln(p + ".final_layer_norm");
    };
    for (int i = 0; i < c.encoder_layers; ++i) {
      const std::string p = absl::StrCat("encoder.layers.", i);
      TNMT_RETURN_IF_ERROR(attn(p + ".self_attn"));
      TNMT_RETURN_IF_ERROR(ln(p + ".self_attn_layer_norm"));
      TNMT_RETURN_IF_ERROR(ffn(p));
    }
    for (int i = 0; i < c.decoder_layers; ++i) {
      const std::string p = absl::StrCat("decoder.layers.", i);
      TNMT_RETURN_IF_ERROR(attn(p + ".self_attn"));
      TNMT_RETURN_IF_ERROR(ln(p + ".self_attn_layer_norm"));
      TNMT_RETURN_IF_ERROR(attn(p + ".encoder_attn"));
      TNMT_RETURN_IF_ERROR(ln(p + ".encoder_attn_layer_norm"));
      TNMT_RETURN_IF_ERROR(ffn(p));
    }
    if (c.normalize_before) {
      TNMT_RETURN_IF_ERROR(ln("encoder.layer_norm"));
      TNMT_RETURN_IF_ERROR(ln("decoder.layer_norm"));
    }
    TNMT_ASSIGN_OR_RETURN(zero_model, ModelWeights::Build(c, std::move(zeros), "init"));
  }
  std::mt19937_64 rng(seed);
  for (ParamRef& p : TrainableParams(c, &zero_model)) {
    Tensor& t = *p.tensor;
    float* x = t.f32();
    const std::string& n = p.name;
    const bool is_bias = n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0;
    const bool is_norm = n.find("layer_norm") != std::string::npos;
    if (is_norm) {
      const float value = is_bias ? 0.0f : 1.0f;
      for (int64_t i = 0; i < t.numel(); ++i) x[i] = value;
    } else if (is_bias) {
      continue;  // zeros
    } else if (n.find("embed") != std::string::npos || n.find("output_projection") != std::string::npos) {
      std::normal_distribution<float> dist(0.0f, 1.0f / std::sqrt(static_cast<float>(c.d_model)));
      for (int64_t i = 0; i < t.numel(); ++i) x[i] = dist(rng);
      if (n.find("embed_tokens") != std::string::npos || n.find("output_projection") != std::string::npos) {
        std::memset(x + static_cast<int64_t>(c.pad_id) * c.d_model, 0, sizeof(float) * c.d_model);
      }
    } else {
      // Fused q/k/v (or k/v) matrices are initialized as separate [d, d] blocks.
      const int64_t out = t.dim(0), in = t.dim(1);
      const int64_t block = (n.find(".qkv.") != std::string::npos || n.find(".kv.") != std::string::npos) ? in : out;
      const float limit = std::sqrt(6.0f / static_cast<float>(block + in));
      std::uniform_real_distribution<float> dist(-limit, limit);
      for (int64_t i = 0; i < t.numel(); ++i) x[i] = dist(rng);
    }
  }
  return zero_model;
}

}  // namespace tnmt::train
