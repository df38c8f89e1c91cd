// Building ModelWeights from named tensors; see weights.h.
#include "engine/model/weights.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status_macros.h"
#include "kernels/cpu/embedding.h"

namespace tnmt {

namespace {

// Gives the tensor of a model-file name, which must have `shape`.
using TakeFn = std::function<absl::StatusOr<Tensor>(const std::string& name, const std::vector<int64_t>& shape)>;

absl::StatusOr<Linear> TakeLinear(const TakeFn& take, const std::string& prefix, int64_t out, int64_t in) {
  Linear l;
  TNMT_ASSIGN_OR_RETURN(l.weight, take(prefix + ".weight", {out, in}));
  TNMT_ASSIGN_OR_RETURN(l.bias, take(prefix + ".bias", {out}));
  return l;
}

// The projections of a fused group, concatenated along the output dimension.
absl::StatusOr<Linear> TakeFused(const TakeFn& take, const std::string& prefix,
                                 const std::vector<std::string>& parts, int64_t d) {
  const int64_t n = static_cast<int64_t>(parts.size());
  Linear fused;
  TNMT_ASSIGN_OR_RETURN(fused.weight, Tensor::Empty({n * d, d}));
  TNMT_ASSIGN_OR_RETURN(fused.bias, Tensor::Empty({n * d}));
  for (int64_t i = 0; i < n; ++i) {
    TNMT_ASSIGN_OR_RETURN(Linear part, TakeLinear(take, prefix + "." + parts[i], d, d));
    std::memcpy(fused.weight.f32() + i * d * d, part.weight.f32(), sizeof(float) * d * d);
    std::memcpy(fused.bias.f32() + i * d, part.bias.f32(), sizeof(float) * d);
  }
  return fused;
}

absl::StatusOr<LayerNormWeights> TakeLayerNorm(const TakeFn& take, const std::string& prefix, int64_t d) {
  LayerNormWeights ln;
  TNMT_ASSIGN_OR_RETURN(ln.gamma, take(prefix + ".weight", {d}));
  TNMT_ASSIGN_OR_RETURN(ln.beta, take(prefix + ".bias", {d}));
  return ln;
}

// shape: [rows, d_model], in the config's sinusoid layout.
absl::StatusOr<Tensor> SinusoidTable(const ModelConfig& c, const std::vector<int64_t>& shape) {
  TNMT_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(shape));
  const int rows = static_cast<int>(shape[0]);
  if (c.sinusoid_layout == SinusoidLayout::kHalves) {
    kernels::cpu::SinusoidalPositionsHalves(t.f32(), rows, c.d_model);
  } else {
    kernels::cpu::SinusoidalPositions(t.f32(), rows, c.d_model);
  }
  return t;
}

// Fills a ModelWeights from `take`, visited in the tree's order. The first error stops the
// walk: a config claiming more layers than the file has fails at the first missing tensor,
// before anything is allocated for the rest.
class Assembler {
 public:
  Assembler(const ModelConfig& c, const TakeFn& take) : c_(c), take_(take) {}

  void Table(const TableInfo& t, Tensor& x) {
    if (status_.ok()) Keep(t.stored() ? take_(t.name, t.shape) : SinusoidTable(c_, t.shape), x);
  }
  void Linear(const Site& s, const LinearGroup& g, tnmt::Linear& l) {
    if (!status_.ok()) return;
    const int64_t d = c_.d_model, ff = c_.d_ff;
    Keep(g.fused > 1 ? TakeFused(take_, s.Name(g.module), g.part_names(), d)
                     : TakeLinear(take_, s.Name(g.name), g.rows(d, ff), g.cols(d, ff)),
         l);
  }
  void Norm(const Site& s, const char* name, LayerNormWeights& ln) {
    if (status_.ok()) Keep(TakeLayerNorm(take_, s.Name(name), c_.d_model), ln);
  }
  bool stopped() const { return !status_.ok(); }
  const absl::Status& status() const { return status_; }

 private:
  template <class T>
  void Keep(absl::StatusOr<T> taken, T& out) {
    if (taken.ok()) out = *std::move(taken);
    else status_ = taken.status();
  }
  const ModelConfig& c_;
  const TakeFn& take_;
  absl::Status status_;
};

absl::StatusOr<ModelWeights> Assemble(const ModelConfig& c, const TakeFn& take) {
  ModelWeights w;
  Assembler assembler(c, take);
  VisitModel(assembler, c, w);
  TNMT_RETURN_IF_ERROR(assembler.status());
  TieModel(c, w);
  return w;
}

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
  auto take = [&](const std::string& name, const std::vector<int64_t>& shape) -> absl::StatusOr<Tensor> {
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      return absl::NotFoundError(absl::StrCat(source, ": missing tensor \"", name, "\""));
    }
    Tensor t = std::move(it->second.value);
    tensors.erase(it);
    if (t.shape() != shape || t.dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": tensor \"", name, "\" has shape ",
                                                     t.ShapeString(), ", expected [",
                                                     absl::StrJoin(shape, ", "), "]"));
    }
    return t;
  };
  TNMT_ASSIGN_OR_RETURN(ModelWeights w, Assemble(c, take));
  if (!tensors.empty()) {
    std::vector<std::string> names;
    for (const auto& [name, t] : tensors) names.push_back("\"" + name + "\"");
    if (names.size() > 5) names.resize(5), names.push_back("...");
    return absl::InvalidArgumentError(absl::StrCat(source, ": unexpected tensor(s) ",
                                                   absl::StrJoin(names, ", "),
                                                   " (config.json does not match the weights?)"));
  }
  return w;
}

absl::StatusOr<ModelWeights> ModelWeights::Zeros(const ModelConfig& c) {
  return Assemble(c, [](const std::string&, const std::vector<int64_t>& shape) { return Tensor::Zeros(shape); });
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

int64_t ModelWeights::Bytes(const ModelConfig& c) const {
  int64_t n = PackedBytes();
  auto add = [&n](const Tensor& t) { n += t.numel() * DTypeSize(t.dtype()); };
  // Tied tables are not visited: every storage counts once.
  VisitModel(MakeModelVisitor([&](const TableInfo&, const Tensor& t) { add(t); },
                              [&](const Site&, const LinearGroup&, const Linear& l) {
                                add(l.weight);
                                add(l.bias);
                              },
                              [&](const Site&, const char*, const LayerNormWeights& ln) {
                                add(ln.gamma);
                                add(ln.beta);
                              }),
             c, *this);
  return n;
}

std::map<std::string, Tensor> ModelWeights::ToTensors(const ModelConfig& c) const {
  const int64_t d = c.d_model;
  std::map<std::string, Tensor> out;
  auto put = [&out](const std::string& p, const Tensor& weight, const Tensor& bias) {
    out[p + ".weight"] = weight;
    out[p + ".bias"] = bias;
  };
  VisitModel(MakeModelVisitor(
                 [&](const TableInfo& t, const Tensor& x) {
                   if (t.stored()) out[t.name] = x;
                 },
                 [&](const Site& s, const LinearGroup& g, const Linear& l) {
                   if (g.fused > 1) {
                     std::map<std::string, Tensor> parts = Split(l, s.Name(g.module), g.part_names(), d);
                     out.insert(parts.begin(), parts.end());
                   } else {
                     put(s.Name(g.name), l.weight, l.bias);
                   }
                 },
                 [&](const Site& s, const char* name, const LayerNormWeights& ln) {
                   put(s.Name(name), ln.gamma, ln.beta);
                 }),
             c, *this);
  return out;
}

}  // namespace tnmt
