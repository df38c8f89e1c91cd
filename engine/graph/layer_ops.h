// The contract between the Transformer graph (transformer.h) and a device: the layer
// operations type `Ops` and the decode step's `Cache`, checked at compile time. Every graph
// function asserts it on its arguments, and each device asserts it beside its definition
// (CpuLayerOps, CudaLayerOps), so a missing or mistyped member is reported by name there
// instead of deep inside a template.
//
// An `Ops` provides (every pointer in the device's memory; every call may queue work
// asynchronously, in order):
//   using Weights = ...;  // the model's parameter tree (ModelWeights, DeviceWeights): fields
//                         // encoder, decoder (vectors of EncoderLayerParams /
//                         // DecoderLayerParams over LinearParams, NormParams),
//                         // encoder_final_ln, decoder_final_ln
//   using LinearParams = ...; using NormParams = ...;
//   const ModelConfig& config() const;  const Weights& weights() const;
//   Status Linear(float* y, const float* x, int64_t rows, const LinearParams& l,
//                 bool activate) const;        // y = x W^T + b, then the config's activation
//   Status LayerNorm(float* y, const float* x, const float* residual, int64_t rows,
//                    const NormParams& ln) const;  // y = LN(x + residual); residual may be null
//   Status Add(float* x, const float* f, int64_t n) const;  // x += f
//   Status Embed(float* x, const int32_t* ids, const int32_t* positions, int64_t rows,
//                bool decoder) const;          // token embedding (scaled) + position
//   Status Attention(float* out, int64_t ld_out, const float* q, int64_t ld_q, const float* k,
//                    const float* v, int64_t ld_kv, int64_t kv_group_stride,
//                    const AttentionArgs& args) const;   // the kernels' attention contract
//   Status ScatterRows(float* dst, int64_t dst_stride, const int32_t* dst_rows,
//                      const float* src, int64_t src_stride, const int32_t* src_rows,
//                      int64_t count, int width) const;  // dst[dst_rows[i]] = src[src_rows[i]]
//   Status Logits(float* logits, const float* x, int64_t rows) const;  // output projection
//
// A decode step's `Cache` (step_plan.h StepCache) provides, per decoder layer li:
//   float* self_pool(size_t li); float* cross_pool(size_t li);  // [slots, 2d]: K then V
//   const int32_t* new_slots() const;                          // [rows] this step's K/V slots
//   const AttentionArgs& self_args() const; const AttentionArgs& cross_args() const;
//   Status AfterCrossAttention(size_t li, const float* q, const AttentionArgs& args);
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "engine/model/config.h"
#include "kernels/attention.h"

namespace tnmt::graph {

using kernels::AttentionArgs;

namespace layer_ops_internal {

// Detected<O, Call>: Call<O> names a valid type (the expression compiles).
template <class O, template <class> class Call, class = void>
struct Detected : std::false_type {};
template <class O, template <class> class Call>
struct Detected<O, Call, std::void_t<Call<O>>> : std::true_type {};

// Call<O> compiles and has type R.
template <class R, template <class> class Call, class O>
constexpr bool Returns() {
  if constexpr (Detected<O, Call>::value) {
    return std::is_same_v<Call<O>, R>;
  } else {
    return false;
  }
}

template <class T>
T& Ref();  // unevaluated only

template <class O>
using ConfigCall = decltype(Ref<const O>().config());
template <class O>
using WeightsCall = decltype(Ref<const O>().weights());
template <class O>
using EncoderLayers = decltype(Ref<const typename O::Weights>().encoder.size());
template <class O>
using DecoderLayers = decltype(Ref<const typename O::Weights>().decoder.size());
template <class O>
using EncoderFinalNorm = decltype(Ref<const typename O::Weights>().encoder_final_ln);
template <class O>
using DecoderFinalNorm = decltype(Ref<const typename O::Weights>().decoder_final_ln);
template <class O>
using LinearCall = decltype(Ref<const O>().Linear(Ref<float*>(), Ref<const float*>(),
                                                  Ref<int64_t>(),
                                                  Ref<const typename O::LinearParams>(),
                                                  Ref<bool>()));
template <class O>
using LayerNormCall = decltype(Ref<const O>().LayerNorm(Ref<float*>(), Ref<const float*>(),
                                                        Ref<const float*>(), Ref<int64_t>(),
                                                        Ref<const typename O::NormParams>()));
template <class O>
using AddCall = decltype(Ref<const O>().Add(Ref<float*>(), Ref<const float*>(), Ref<int64_t>()));
template <class O>
using EmbedCall = decltype(Ref<const O>().Embed(Ref<float*>(), Ref<const int32_t*>(),
                                                Ref<const int32_t*>(), Ref<int64_t>(),
                                                Ref<bool>()));
template <class O>
using AttentionCall = decltype(Ref<const O>().Attention(
    Ref<float*>(), Ref<int64_t>(), Ref<const float*>(), Ref<int64_t>(), Ref<const float*>(),
    Ref<const float*>(), Ref<int64_t>(), Ref<int64_t>(), Ref<const AttentionArgs>()));
template <class O>
using ScatterRowsCall = decltype(Ref<const O>().ScatterRows(
    Ref<float*>(), Ref<int64_t>(), Ref<const int32_t*>(), Ref<const float*>(), Ref<int64_t>(),
    Ref<const int32_t*>(), Ref<int64_t>(), Ref<int>()));
template <class O>
using LogitsCall = decltype(Ref<const O>().Logits(Ref<float*>(), Ref<const float*>(),
                                                  Ref<int64_t>()));

template <class C>
using SelfPoolCall = decltype(Ref<C>().self_pool(Ref<size_t>()));
template <class C>
using CrossPoolCall = decltype(Ref<C>().cross_pool(Ref<size_t>()));
template <class C>
using NewSlotsCall = decltype(Ref<const C>().new_slots());
template <class C>
using SelfArgsCall = decltype(Ref<const C>().self_args());
template <class C>
using CrossArgsCall = decltype(Ref<const C>().cross_args());
template <class C>
using AfterCrossCall = decltype(Ref<C>().AfterCrossAttention(Ref<size_t>(), Ref<const float*>(),
                                                             Ref<const AttentionArgs>()));

// Each member of the contracts, checked once: kIsLayerOps / kIsStepCache combine them, and
// CheckLayerOps / CheckStepCache assert them one by one with the member's signature.
template <class O>
struct OpsMembers {
  using S = absl::Status;
  static constexpr bool config = Returns<const ModelConfig&, ConfigCall, O>();
  static constexpr bool weights = Detected<O, WeightsCall>::value;
  static constexpr bool layers = Detected<O, EncoderLayers>::value && Detected<O, DecoderLayers>::value;
  static constexpr bool final_norms =
      Detected<O, EncoderFinalNorm>::value && Detected<O, DecoderFinalNorm>::value;
  static constexpr bool linear = Returns<S, LinearCall, O>();
  static constexpr bool layer_norm = Returns<S, LayerNormCall, O>();
  static constexpr bool add = Returns<S, AddCall, O>();
  static constexpr bool embed = Returns<S, EmbedCall, O>();
  static constexpr bool attention = Returns<S, AttentionCall, O>();
  static constexpr bool scatter_rows = Returns<S, ScatterRowsCall, O>();
  static constexpr bool logits = Returns<S, LogitsCall, O>();
  static constexpr bool all = config && weights && layers && final_norms && linear && layer_norm &&
                              add && embed && attention && scatter_rows && logits;
};

template <class C>
struct CacheMembers {
  static constexpr bool pools = Returns<float*, SelfPoolCall, C>() && Returns<float*, CrossPoolCall, C>();
  static constexpr bool new_slots = Returns<const int32_t*, NewSlotsCall, C>();
  static constexpr bool args = Returns<const AttentionArgs&, SelfArgsCall, C>() &&
                               Returns<const AttentionArgs&, CrossArgsCall, C>();
  static constexpr bool after_cross = Returns<absl::Status, AfterCrossCall, C>();
  static constexpr bool all = pools && new_slots && args && after_cross;
};

}  // namespace layer_ops_internal

// True when Ops meets the contract above (usable in tests and if constexpr).
template <class Ops>
inline constexpr bool kIsLayerOps = layer_ops_internal::OpsMembers<Ops>::all;

template <class Cache>
inline constexpr bool kIsStepCache = layer_ops_internal::CacheMembers<Cache>::all;

// static_assert(CheckLayerOps<Ops>()): fails naming the first member Ops lacks or mistypes.
template <class Ops>
constexpr bool CheckLayerOps() {
  using M = layer_ops_internal::OpsMembers<Ops>;
  static_assert(M::config, "Ops: const ModelConfig& config() const");
  static_assert(M::weights, "Ops: const Weights& weights() const");
  static_assert(M::layers, "Ops::Weights: vectors `encoder` and `decoder` of layer parameter trees");
  static_assert(M::final_norms, "Ops::Weights: NormParams `encoder_final_ln` and `decoder_final_ln`");
  static_assert(M::linear,
                "Ops: Status Linear(float* y, const float* x, int64_t rows, const LinearParams&, "
                "bool activate) const");
  static_assert(M::layer_norm,
                "Ops: Status LayerNorm(float* y, const float* x, const float* residual, int64_t "
                "rows, const NormParams&) const");
  static_assert(M::add, "Ops: Status Add(float* x, const float* f, int64_t n) const");
  static_assert(M::embed,
                "Ops: Status Embed(float* x, const int32_t* ids, const int32_t* positions, "
                "int64_t rows, bool decoder) const");
  static_assert(M::attention,
                "Ops: Status Attention(float* out, int64_t ld_out, const float* q, int64_t ld_q, "
                "const float* k, const float* v, int64_t ld_kv, int64_t kv_group_stride, const "
                "AttentionArgs&) const");
  static_assert(M::scatter_rows,
                "Ops: Status ScatterRows(float* dst, int64_t dst_stride, const int32_t* dst_rows, "
                "const float* src, int64_t src_stride, const int32_t* src_rows, int64_t count, "
                "int width) const");
  static_assert(M::logits, "Ops: Status Logits(float* logits, const float* x, int64_t rows) const");
  return true;
}

template <class Cache>
constexpr bool CheckStepCache() {
  using M = layer_ops_internal::CacheMembers<Cache>;
  static_assert(M::pools, "Cache: float* self_pool(size_t layer), float* cross_pool(size_t layer)");
  static_assert(M::new_slots, "Cache: const int32_t* new_slots() const");
  static_assert(M::args, "Cache: const AttentionArgs& self_args() const, cross_args() const");
  static_assert(M::after_cross,
                "Cache: Status AfterCrossAttention(size_t layer, const float* q, const "
                "AttentionArgs&)");
  return true;
}

}  // namespace tnmt::graph
