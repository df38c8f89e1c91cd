// The Transformer's parameter tree, declared once over storage types: `Lin` holds one linear
// layer (weight [out, in] and bias [out]), `Norm` one layer norm (gamma, beta), `Mat` a
// vocabulary table (token embeddings, output projection: GEMM operands), `Vec` a float32 table
// (positions) or vector (logits bias). The engine's host weights (engine/model/weights.h:
// Tensors), the GPU's weights (engine/cuda/device_weights.h: device pointers) and the trainer's
// flat layout (trainer/model/flat_layout.h: element offsets) are the same tree over different
// storages.
//
// VisitModel walks the whole model in one declared order, in step over any number of storages
// (each a ModelParams, or any struct with its fields; a const one's layer vectors sized to the
// config). A visitor with a `bool stopped() const` that returns true ends the walk before the
// next layer:
//   VisitModel(MakeModelVisitor(on_table, on_linear, on_norm), config, host, device);
// calls on_table(info, host.encoder_embed, device.encoder_embed), ..., then
// on_linear(site, group, host.encoder[0].self_qkv, device.encoder[0].self_qkv), ...,
// on_norm(site, name, ...), .... A TableInfo gives a model-level tensor's name in model files,
// its shape from the config and its kind (what it is and how it is initialised); a Site gives
// the layer (or the stack, for its final layer norm), which prefixes the names. Only what the
// config has is visited: a tied table (shared embeddings, an output projection tied to the
// decoder's embeddings, the decoder's sinusoid table) is not; TieModel then makes it share its
// source's storage. Final layer norms exist in pre-norm models only, learned positions in
// learned-position models, the logits bias where the config says.
//
// VisitEncoderLayer / VisitDecoderLayer walk one layer's parameter groups in declaration
// order, in step over any number of layers of the same kind (each over its own storage):
//   VisitDecoderLayer(MakeParamVisitor(on_linear, on_norm), host_layer, device_layer);
// calls on_linear(group, host_layer.self_qkv, device_layer.self_qkv), ..., and
// on_norm(name, host_layer.self_ln, device_layer.self_ln), .... Names are fairseq's module
// names inside the layer ("self_attn.out_proj", "final_layer_norm", ...), the fused
// projections named "self_attn.qkv" and "encoder_attn.kv"; a LinearGroup also gives the
// weight's shape and, when fused, the projections it is stored as in model files.
//
// Declaration order (VisitModel's) is the order the trainer lists parameters in
// (TrainableParams, FlatLayout), so it is part of the checkpoint format of optimizer state:
// append, never reorder.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/model/config.h"

namespace tnmt {

template <class Lin, class Norm>
struct EncoderLayerParams {
  Lin self_qkv;  // [3*d, d]: q, k and v projections fused
  Lin self_out;  // [d, d]
  Norm self_ln;
  Lin fc1;  // [d_ff, d]
  Lin fc2;  // [d, d_ff]
  Norm final_ln;
};

template <class Lin, class Norm>
struct DecoderLayerParams {
  Lin self_qkv;  // [3*d, d]
  Lin self_out;  // [d, d]
  Norm self_ln;
  Lin cross_q;   // [d, d]
  Lin cross_kv;  // [2*d, d]: k and v fused, applied to the encoder output
  Lin cross_out;  // [d, d]
  Norm cross_ln;
  Lin fc1;  // [d_ff, d]
  Lin fc2;  // [d, d_ff]
  Norm final_ln;
};

// What a visitor learns about one linear group besides its storage.
enum class Width { kModel, kFf };  // d_model or d_ff
struct LinearGroup {
  const char* name;                    // inside its layer, e.g. "self_attn.qkv", "fc1"
  Width out = Width::kModel;           // weight: [fused * out, in]
  Width in = Width::kModel;
  int fused = 1;                       // projections concatenated along the output dimension
  const char* module = nullptr;        // fused only: the module holding them ("self_attn")
  const char* const* parts = nullptr;  // fused only: their names in model files ("q_proj", ...)

  int64_t rows(int64_t d_model, int64_t d_ff) const { return fused * (out == Width::kFf ? d_ff : d_model); }
  int64_t cols(int64_t d_model, int64_t d_ff) const { return in == Width::kFf ? d_ff : d_model; }
  // Fused only: the projections' names, in order.
  std::vector<std::string> part_names() const { return {parts, parts + fused}; }
};

namespace param_tree_internal {
inline constexpr const char* kQkv[] = {"q_proj", "k_proj", "v_proj"};
inline constexpr const char* kKv[] = {"k_proj", "v_proj"};
inline constexpr LinearGroup kSelfQkv{"self_attn.qkv", Width::kModel, Width::kModel, 3, "self_attn", kQkv};
inline constexpr LinearGroup kSelfOut{"self_attn.out_proj"};
inline constexpr LinearGroup kCrossQ{"encoder_attn.q_proj"};
inline constexpr LinearGroup kCrossKv{"encoder_attn.kv", Width::kModel, Width::kModel, 2, "encoder_attn", kKv};
inline constexpr LinearGroup kCrossOut{"encoder_attn.out_proj"};
inline constexpr LinearGroup kFc1{"fc1", Width::kFf, Width::kModel};
inline constexpr LinearGroup kFc2{"fc2", Width::kModel, Width::kFf};
}  // namespace param_tree_internal

// A visitor from two callables: Linear(group, ...) forwards to the first, Norm(name, ...) to
// the second.
template <class OnLinear, class OnNorm>
struct ParamVisitor {
  OnLinear on_linear;
  OnNorm on_norm;
  template <class... T>
  void Linear(const LinearGroup& group, T&... storage) {
    on_linear(group, storage...);
  }
  template <class... T>
  void Norm(const char* name, T&... storage) {
    on_norm(name, storage...);
  }
};

template <class OnLinear, class OnNorm>
ParamVisitor<OnLinear, OnNorm> MakeParamVisitor(OnLinear on_linear, OnNorm on_norm) {
  return {std::move(on_linear), std::move(on_norm)};
}

template <class V, class... Layer>
void VisitEncoderLayer(V&& v, Layer&... l) {
  namespace g = param_tree_internal;
  v.Linear(g::kSelfQkv, l.self_qkv...);
  v.Linear(g::kSelfOut, l.self_out...);
  v.Norm("self_attn_layer_norm", l.self_ln...);
  v.Linear(g::kFc1, l.fc1...);
  v.Linear(g::kFc2, l.fc2...);
  v.Norm("final_layer_norm", l.final_ln...);
}

template <class V, class... Layer>
void VisitDecoderLayer(V&& v, Layer&... l) {
  namespace g = param_tree_internal;
  v.Linear(g::kSelfQkv, l.self_qkv...);
  v.Linear(g::kSelfOut, l.self_out...);
  v.Norm("self_attn_layer_norm", l.self_ln...);
  v.Linear(g::kCrossQ, l.cross_q...);
  v.Linear(g::kCrossKv, l.cross_kv...);
  v.Linear(g::kCrossOut, l.cross_out...);
  v.Norm("encoder_attn_layer_norm", l.cross_ln...);
  v.Linear(g::kFc1, l.fc1...);
  v.Linear(g::kFc2, l.fc2...);
  v.Norm("final_layer_norm", l.final_ln...);
}

// ---- The whole model ----

// Rows of the sinusoidal position table computed at load (longest supported sequence).
inline constexpr int kSinusoidTableRows = 4096;

template <class Mat, class Vec, class Lin, class Norm>
struct ModelParams {
  Mat encoder_embed{};      // [vocab, d]
  Mat decoder_embed{};      // [vocab, d]; encoder_embed's storage when share_embeddings
  Mat output_projection{};  // [vocab, d]; decoder_embed's when share_decoder_input_output_embed
  Vec final_logits_bias{};  // [vocab]; config.final_logits_bias only
  Vec encoder_positions{};  // [max_positions, d] learned, or [kSinusoidTableRows, d] computed
  Vec decoder_positions{};  // the same shape; encoder_positions' storage when sinusoidal
  std::vector<EncoderLayerParams<Lin, Norm>> encoder;  // [encoder_layers]
  std::vector<DecoderLayerParams<Lin, Norm>> decoder;  // [decoder_layers]
  Norm encoder_final_ln{};  // pre-norm only
  Norm decoder_final_ln{};  // pre-norm only
};

// What a model-level table is, which also says how the trainer initialises it.
enum class TableKind {
  kEmbedding,  // token embeddings or output projection [vocab, d]: N(0, d^-1/2), pad row 0
  kPositions,  // learned positions [max_positions, d]: N(0, d^-1/2)
  kSinusoid,   // sinusoidal positions: computed at load; not in model files, not trained
  kBias,       // a bias vector: zeros; not trained (the training graph adds no logits bias)
};

// Which ModelParams field a table is.
enum class TableRole {
  kEncoderEmbed,
  kDecoderEmbed,
  kOutputProjection,
  kFinalLogitsBias,
  kEncoderPositions,
  kDecoderPositions,
};

// What a visitor learns about one model-level table besides its storage.
struct TableInfo {
  TableRole role;
  TableKind kind;
  const char* name;            // in model files, e.g. "encoder.embed_tokens.weight"
  std::vector<int64_t> shape;  // from the config

  bool stored() const { return kind != TableKind::kSinusoid; }  // in model files
  bool trained() const { return kind == TableKind::kEmbedding || kind == TableKind::kPositions; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// Where a group sits: layer `layer` of a stack, or (layer -1) the stack itself (its final
// layer norm).
enum class Stack { kEncoder, kDecoder };
struct Site {
  Stack stack;
  int layer = -1;

  // The model-file name of `inside` here: "decoder.layers.2.fc1", "encoder.layer_norm".
  std::string Name(const char* inside) const {
    std::string s = stack == Stack::kEncoder ? "encoder" : "decoder";
    if (layer >= 0) s += ".layers." + std::to_string(layer);
    return s + "." + inside;
  }
};

// A model visitor from three callables: Table(info, ...) forwards to the first,
// Linear(site, group, ...) to the second, Norm(site, name, ...) to the third.
template <class OnTable, class OnLinear, class OnNorm>
struct ModelVisitor {
  OnTable on_table;
  OnLinear on_linear;
  OnNorm on_norm;
  template <class... T>
  void Table(const TableInfo& info, T&... storage) {
    on_table(info, storage...);
  }
  template <class... T>
  void Linear(const Site& site, const LinearGroup& group, T&... storage) {
    on_linear(site, group, storage...);
  }
  template <class... T>
  void Norm(const Site& site, const char* name, T&... storage) {
    on_norm(site, name, storage...);
  }
};

template <class OnTable, class OnLinear, class OnNorm>
ModelVisitor<OnTable, OnLinear, OnNorm> MakeModelVisitor(OnTable on_table, OnLinear on_linear,
                                                         OnNorm on_norm) {
  return {std::move(on_table), std::move(on_linear), std::move(on_norm)};
}

namespace param_tree_internal {
// A layer visitor that hands its groups to a model visitor at `site`.
template <class V>
struct AtSite {
  V& v;
  Site site;
  template <class... T>
  void Linear(const LinearGroup& group, T&... storage) {
    v.Linear(site, group, storage...);
  }
  template <class... T>
  void Norm(const char* name, T&... storage) {
    v.Norm(site, name, storage...);
  }
};

template <class V, class = void>
struct HasStopped : std::false_type {};
template <class V>
struct HasStopped<V, std::void_t<decltype(std::declval<const V&>().stopped())>> : std::true_type {};
template <class V>
bool Stopped(const V& v) {
  if constexpr (HasStopped<V>::value) {
    return v.stopped();
  } else {
    return false;
  }
}

// Layer i of a stack; a layer vector that is not const grows to hold it.
template <class L>
L& LayerOf(std::vector<L>& layers, int i) {
  if (layers.size() <= static_cast<size_t>(i)) layers.resize(static_cast<size_t>(i) + 1);
  return layers[static_cast<size_t>(i)];
}
template <class L>
const L& LayerOf(const std::vector<L>& layers, int i) {
  return layers[static_cast<size_t>(i)];
}
}  // namespace param_tree_internal

// Sizes a ModelParams' layer vectors as the config says: before a VisitModel whose visitor keeps
// addresses into it (VisitModel grows a storage's layer vectors one layer at a time otherwise).
template <class M>
void ResizeLayers(const ModelConfig& c, M& m) {
  m.encoder.resize(static_cast<size_t>(c.encoder_layers));
  m.decoder.resize(static_cast<size_t>(c.decoder_layers));
}

template <class V, class... M>
void VisitModel(V&& v, const ModelConfig& c, M&... m) {
  const int64_t vocab = c.vocab_size, d = c.d_model;
  const bool learned = c.position_encoding == PositionEncoding::kLearned;
  const std::vector<int64_t> positions = {learned ? c.max_positions : kSinusoidTableRows, d};
  const TableKind position_kind = learned ? TableKind::kPositions : TableKind::kSinusoid;
  v.Table(TableInfo{TableRole::kEncoderEmbed, TableKind::kEmbedding, "encoder.embed_tokens.weight", {vocab, d}},
          m.encoder_embed...);
  if (!c.share_embeddings) {
    v.Table(TableInfo{TableRole::kDecoderEmbed, TableKind::kEmbedding, "decoder.embed_tokens.weight", {vocab, d}},
            m.decoder_embed...);
  }
  if (!c.share_decoder_input_output_embed) {
    v.Table(TableInfo{TableRole::kOutputProjection, TableKind::kEmbedding, "decoder.output_projection.weight",
                      {vocab, d}},
            m.output_projection...);
  }
  if (c.final_logits_bias) {
    v.Table(TableInfo{TableRole::kFinalLogitsBias, TableKind::kBias, "final_logits_bias", {vocab}},
            m.final_logits_bias...);
  }
  v.Table(TableInfo{TableRole::kEncoderPositions, position_kind, "encoder.embed_positions.weight", positions},
          m.encoder_positions...);
  if (learned) {
    v.Table(TableInfo{TableRole::kDecoderPositions, position_kind, "decoder.embed_positions.weight", positions},
            m.decoder_positions...);
  }
  namespace g = param_tree_internal;
  for (int i = 0; i < c.encoder_layers && !g::Stopped(v); ++i) {
    VisitEncoderLayer(g::AtSite<V>{v, Site{Stack::kEncoder, i}}, g::LayerOf(m.encoder, i)...);
  }
  for (int i = 0; i < c.decoder_layers && !g::Stopped(v); ++i) {
    VisitDecoderLayer(g::AtSite<V>{v, Site{Stack::kDecoder, i}}, g::LayerOf(m.decoder, i)...);
  }
  if (c.normalize_before) {
    v.Norm(Site{Stack::kEncoder}, "layer_norm", m.encoder_final_ln...);
    v.Norm(Site{Stack::kDecoder}, "layer_norm", m.decoder_final_ln...);
  }
}

// Makes the tables VisitModel skips as tied share their sources' storage (copies the handle,
// pointer or offset), in each of `m`.
template <class... M>
void TieModel(const ModelConfig& c, M&... m) {
  if (c.share_embeddings) ((m.decoder_embed = m.encoder_embed), ...);
  if (c.share_decoder_input_output_embed) ((m.output_projection = m.decoder_embed), ...);
  if (c.position_encoding == PositionEncoding::kSinusoidal) ((m.decoder_positions = m.encoder_positions), ...);
}

}  // namespace tnmt
