// The Transformer's per-layer parameter tree, declared once over a storage type: `Lin` holds
// one linear layer (weight [out, in] and bias [out]), `Norm` one layer norm (gamma, beta).
// The engine's host weights (engine/model/weights.h: Tensors), the GPU's weights
// (engine/cuda/device_weights.h: device pointers) and the trainer's flat layout
// (trainer/model/flat_layout.h: element offsets) are the same trees over different storages.
//
// VisitEncoderLayer / VisitDecoderLayer walk one layer's parameter groups in declaration
// order, in step over any number of layers of the same kind (each over its own storage):
//   VisitDecoderLayer(MakeParamVisitor(on_linear, on_norm), host_layer, device_layer);
// calls on_linear(group, host_layer.self_qkv, device_layer.self_qkv), ..., and
// on_norm(name, host_layer.self_ln, device_layer.self_ln), .... Names are fairseq's module
// names inside the layer ("self_attn.out_proj", "final_layer_norm", ...), the fused
// projections named "self_attn.qkv" and "encoder_attn.kv"; a LinearGroup also gives the
// weight's shape and, when fused, the projections it is stored as in model files. Declaration order is the order
// the trainer lays parameters out in (TrainableParams, FlatLayout), so it is part of the
// checkpoint format of optimizer state: append, never reorder.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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

}  // namespace tnmt
