// Building ModelWeights from named tensors; see weights.h.
#include "engine/model/weights.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status_macros.h"
#include "kernels/cpu/embedding.h"

namespace tnmt {

namespace {

class Loader {
 public:
  Loader(TensorMap tensors, std::string source)
      : tensors_(std::move(tensors)), source_(std::move(source)) {}

  absl::StatusOr<Tensor> Take(const std::string& name, std::vector<int64_t> shape) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      return absl::NotFoundError(absl::StrCat(source_, ": missing tensor \"", name, "\""));
    }
    Tensor t = std::move(it->second.value);
    tensors_.erase(it);
    if (t.shape() != shape || t.dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(
          source_, ": tensor \"", name, "\" has shape ", t.ShapeString(), ", expected [",
          absl::StrJoin(shape, ", "), "]"));
    }
    return t;
  }

  absl::StatusOr<Linear> TakeLinear(const std::string& prefix, int64_t out, int64_t in) {
    Linear l;
    TNMT_ASSIGN_OR_RETURN(l.weight, Take(prefix + ".weight", {out, in}));
    TNMT_ASSIGN_OR_RETURN(l.bias, Take(prefix + ".bias", {out}));
    return l;
  }

  // Concatenates the given projections along the output dimension.
  absl::StatusOr<Linear> TakeFused(const std::string& prefix, const std::vector<std::string>& parts,
                                   int64_t d) {
    const int64_t n = static_cast<int64_t>(parts.size());
    Linear fused;
    TNMT_ASSIGN_OR_RETURN(fused.weight, Tensor::Empty({n * d, d}));
    TNMT_ASSIGN_OR_RETURN(fused.bias, Tensor::Empty({n * d}));
    for (int64_t i = 0; i < n; ++i) {
      TNMT_ASSIGN_OR_RETURN(Linear part, TakeLinear(prefix + "." + parts[i], d, d));
      std::memcpy(fused.weight.f32() + i * d * d, part.weight.f32(), sizeof(float) * d * d);
      std::memcpy(fused.bias.f32() + i * d, part.bias.f32(), sizeof(float) * d);
    }
    return fused;
  }

  absl::StatusOr<LayerNormWeights> TakeLayerNorm(const std::string& prefix, int64_t d) {
    LayerNormWeights ln;
    TNMT_ASSIGN_OR_RETURN(ln.gamma, Take(prefix + ".weight", {d}));
    TNMT_ASSIGN_OR_RETURN(ln.beta, Take(prefix + ".bias", {d}));
    return ln;
  }

  absl::Status CheckAllUsed() const {
    if (tensors_.empty()) return absl::OkStatus();
    std::vector<std::string> names;
    for (const auto& [name, t] : tensors_) names.push_back("\"" + name + "\"");
    if (names.size() > 5) names.resize(5), names.push_back("...");
    return absl::InvalidArgumentError(absl::StrCat(source_, ": unexpected tensor(s) ",
                                                   absl::StrJoin(names, ", "),
                                                   " (config.json does not match the weights?)"));
  }

 private:
  TensorMap tensors_;
  std::string source_;
};

std::map<std::string, Tensor> Split(const Linear& fused, const std::string& prefix,
                                    const std::vector<std::string>& parts, int64_t d) {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    out[prefix + "." + parts[i] + ".weight"] = *fused.weight.Rows(i * d, (i + 1) * d).Reshape({d, d});
    out[prefix + "." + parts[i] + ".bias"] = fused.bias.Rows(i * d, (i + 1) * d);
  }
  return out;
}

}  // namespace

int MaxPositions(const ModelConfig& config) {
  if (config.position_encoding == PositionEncoding::kLearned) return config.max_positions;
  return config.max_sinusoid_positions > 0
             ? std::min(config.max_sinusoid_positions, ModelWeights::kSinusoidRows)
             : ModelWeights::kSinusoidRows;
}

absl::StatusOr<ModelWeights> ModelWeights::Build(const ModelConfig& c, TensorMap tensors,
                                                 const std::string& source) {
  Loader L(std::move(tensors), source);
  ModelWeights w;
  const int64_t d = c.d_model, v = c.vocab_size, ff = c.d_ff;
  TNMT_ASSIGN_OR_RETURN(w.encoder_embed, L.Take("encoder.embed_tokens.weight", {v, d}));
  if (c.share_embeddings) {
    w.decoder_embed = w.encoder_embed;
  } else {
    TNMT_ASSIGN_OR_RETURN(w.decoder_embed, L.Take("decoder.embed_tokens.weight", {v, d}));
  }
  if (c.share_decoder_input_output_embed) {
    w.output_projection = w.decoder_embed;
  } else {
    TNMT_ASSIGN_OR_RETURN(w.output_projection, L.Take("decoder.output_projection.weight", {v, d}));
  }
  if (c.final_logits_bias) {
    TNMT_ASSIGN_OR_RETURN(w.final_logits_bias, L.Take("final_logits_bias", {v}));
  }
  if (c.position_encoding == PositionEncoding::kLearned) {
    TNMT_ASSIGN_OR_RETURN(w.encoder_positions,
                          L.Take("encoder.embed_positions.weight", {c.max_positions, d}));
    TNMT_ASSIGN_OR_RETURN(w.decoder_positions,
                          L.Take("decoder.embed_positions.weight", {c.max_positions, d}));
  } else {
    TNMT_ASSIGN_OR_RETURN(w.encoder_positions, Tensor::Empty({kSinusoidRows, d}));
    if (c.sinusoid_layout == SinusoidLayout::kHalves) {
      kernels::cpu::SinusoidalPositionsHalves(w.encoder_positions.f32(), kSinusoidRows, c.d_model);
    } else {
      kernels::cpu::SinusoidalPositions(w.encoder_positions.f32(), kSinusoidRows, c.d_model);
    }
    w.decoder_positions = w.encoder_positions;
  }
  // Every layer's groups as param_tree.h lists them.
  absl::Status status;
  auto keep = [&status](auto taken, auto& out) {
    if (taken.ok()) out = *std::move(taken);
    else status = taken.status();
  };
  auto layer_loader = [&](const std::string& p) {
    return MakeParamVisitor(
        [&, p](const LinearGroup& g, Linear& l) {
          if (!status.ok()) return;  // the first error stops the loading
          keep(g.fused > 1 ? L.TakeFused(p + "." + g.module, g.part_names(), d)
                           : L.TakeLinear(p + "." + g.name, g.rows(d, ff), g.cols(d, ff)),
               l);
        },
        [&, p](const char* name, LayerNormWeights& ln) {
          if (!status.ok()) return;
          keep(L.TakeLayerNorm(p + "." + name, d), ln);
        });
  };
  // (One layer at a time: a config claiming more layers than the file has fails at the first
  // missing one, before anything is allocated for the rest.)
  for (int i = 0; i < c.encoder_layers && status.ok(); ++i) {
    VisitEncoderLayer(layer_loader(absl::StrCat("encoder.layers.", i)), w.encoder.emplace_back());
  }
  for (int i = 0; i < c.decoder_layers && status.ok(); ++i) {
    VisitDecoderLayer(layer_loader(absl::StrCat("decoder.layers.", i)), w.decoder.emplace_back());
  }
  TNMT_RETURN_IF_ERROR(status);
  if (c.normalize_before) {
    TNMT_ASSIGN_OR_RETURN(w.encoder_final_ln, L.TakeLayerNorm("encoder.layer_norm", d));
    TNMT_ASSIGN_OR_RETURN(w.decoder_final_ln, L.TakeLayerNorm("decoder.layer_norm", d));
  }
  TNMT_RETURN_IF_ERROR(L.CheckAllUsed());
  return w;
}

namespace {

// w: [out, in] packed for GemmPacked, float32 or int8.
kernels::cpu::PackedMatrix Pack(const Tensor& w, bool int8) {
  const auto pack = int8 ? &kernels::cpu::PackedMatrix::PackInt8 : &kernels::cpu::PackedMatrix::Pack;
  return pack(static_cast<int>(w.dim(0)), static_cast<int>(w.dim(1)), w.f32(),
              static_cast<int>(w.dim(1)));
}

}  // namespace

void ModelWeights::PackForInference(bool int8) {
  // Every linear, the encoder's and the cross-attention K/V too: then no inference GEMM goes
  // through OpenBLAS, whose rounding depends on the thread count and the batch, and a
  // sentence's scores are the same whatever it is batched with and however many threads run.
  auto packer = MakeParamVisitor([int8](const LinearGroup&, Linear& l) { l.packed = Pack(l.weight, int8); },
                                  [](const char*, LayerNormWeights&) {});
  for (EncoderLayerWeights& l : encoder) VisitEncoderLayer(packer, l);
  for (DecoderLayerWeights& l : decoder) VisitDecoderLayer(packer, l);
  output_projection_packed = Pack(output_projection, int8);
}

int64_t ModelWeights::PackedBytes() const {
  int64_t n = output_projection_packed.bytes();
  auto add = MakeParamVisitor([&n](const LinearGroup&, const Linear& l) { n += l.packed.bytes(); },
                              [](const char*, const LayerNormWeights&) {});
  for (const EncoderLayerWeights& l : encoder) VisitEncoderLayer(add, l);
  for (const DecoderLayerWeights& l : decoder) VisitDecoderLayer(add, l);
  return n;
}

int64_t ModelWeights::Bytes() const {
  int64_t n = PackedBytes();
  std::set<const void*> seen;  // tied embeddings share one storage
  auto add = [&](const Tensor& t) {
    if (!t.empty() && seen.insert(t.data<void>()).second) n += t.numel() * DTypeSize(t.dtype());
  };
  for (const Tensor* t : {&encoder_embed, &decoder_embed, &output_projection, &final_logits_bias,
                          &encoder_positions, &decoder_positions}) {
    add(*t);
  }
  auto visit = MakeParamVisitor(
      [&](const LinearGroup&, const Linear& l) {
        add(l.weight);
        add(l.bias);
      },
      [&](const char*, const LayerNormWeights& ln) {
        add(ln.gamma);
        add(ln.beta);
      });
  for (const EncoderLayerWeights& l : encoder) VisitEncoderLayer(visit, l);
  for (const DecoderLayerWeights& l : decoder) VisitDecoderLayer(visit, l);
  for (const LayerNormWeights* ln : {&encoder_final_ln, &decoder_final_ln}) {
    add(ln->gamma);
    add(ln->beta);
  }
  return n;
}

std::map<std::string, Tensor> ModelWeights::ToTensors(const ModelConfig& c) const {
  const int64_t d = c.d_model;
  std::map<std::string, Tensor> out;
  auto put_linear = [&](const std::string& p, const Linear& l) {
    out[p + ".weight"] = l.weight;
    out[p + ".bias"] = l.bias;
  };
  auto put_ln = [&](const std::string& p, const LayerNormWeights& ln) {
    out[p + ".weight"] = ln.gamma;
    out[p + ".bias"] = ln.beta;
  };
  auto merge = [&](std::map<std::string, Tensor> m) { out.insert(m.begin(), m.end()); };
  out["encoder.embed_tokens.weight"] = encoder_embed;
  if (!c.share_embeddings) out["decoder.embed_tokens.weight"] = decoder_embed;
  if (!c.share_decoder_input_output_embed) out["decoder.output_projection.weight"] = output_projection;
  if (c.final_logits_bias) out["final_logits_bias"] = final_logits_bias;
  if (c.position_encoding == PositionEncoding::kLearned) {
    out["encoder.embed_positions.weight"] = encoder_positions;
    out["decoder.embed_positions.weight"] = decoder_positions;
  }
  auto layer_writer = [&](const std::string& p) {
    return MakeParamVisitor(
        [&, p](const LinearGroup& g, const Linear& l) {
          if (g.fused > 1) {
            merge(Split(l, p + "." + g.module, g.part_names(), d));
          } else {
            put_linear(p + "." + g.name, l);
          }
        },
        [&, p](const char* name, const LayerNormWeights& ln) { put_ln(p + "." + name, ln); });
  };
  for (size_t i = 0; i < encoder.size(); ++i) {
    VisitEncoderLayer(layer_writer(absl::StrCat("encoder.layers.", i)), encoder[i]);
  }
  for (size_t i = 0; i < decoder.size(); ++i) {
    VisitDecoderLayer(layer_writer(absl::StrCat("decoder.layers.", i)), decoder[i]);
  }
  if (c.normalize_before) {
    put_ln("encoder.layer_norm", encoder_final_ln);
    put_ln("decoder.layer_norm", decoder_final_ln);
  }
  return out;
}

}  // namespace tnmt
