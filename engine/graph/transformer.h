// The Transformer's inference graph, written once over a device's layer operations: the
// encoder (over any layout of source rows; both devices pack sentences without padding, see
// source_plan.h), the cross-attention K/V of its output, and the KV-cached decoder (any number
// of new positions per row) up to the logits. The CPU engine
// (engine/layers/encoder.cc, decoder.cc over CpuLayerOps) and the CUDA engine
// (engine/cuda/cuda_step_model.cc over CudaLayerOps) both run these functions; only the
// operations and where memory lives differ.
//
// `Ops` (the device's layer operations) and the decode step's `Cache` meet the contract of
// layer_ops.h, asserted at compile time by every function here.
//
// Residual wiring (the config's normalize_before): post-norm x = LN(x + f(x)), pre-norm
// x = x + f(LN(x)) with a final layer norm after each stack.
#pragma once

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/status_macros.h"
#include "engine/graph/layer_ops.h"
#include "engine/model/config.h"
#include "kernels/attention.h"

namespace tnmt::graph {

using kernels::AttentionArgs;

// Scratch of one forward pass over `rows` rows, float32, in the device's memory.
struct Activations {
  float* x = nullptr;       // [rows, d] the residual stream (the encoder's output)
  float* y = nullptr;       // [rows, d] a sub-layer's output, or its normalized input
  float* qkv = nullptr;     // [rows, 3d] (the cross K/V [rows, 2d] of CrossKeysValues too)
  float* attn = nullptr;    // [rows, d]
  float* cq = nullptr;      // [rows, d] cross-attention queries (decoder only)
  float* hidden = nullptr;  // [rows, d_ff]
};

// Attention arguments with the model's heads and scale; the caller fills the rest.
inline AttentionArgs ModelAttention(const ModelConfig& c) {
  AttentionArgs a;
  a.num_heads = c.num_heads;
  a.d_head = c.d_head();
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.d_head()));
  return a;
}

// A sub-layer's input: x itself (post-norm) or LN(x) written to scratch (pre-norm).
template <class Ops>
absl::StatusOr<const float*> SublayerInput(const Ops& ops, const float* x, float* scratch,
                                           int64_t rows, const typename Ops::NormParams& ln) {
  if (!ops.config().normalize_before) return x;
  TNMT_RETURN_IF_ERROR(ops.LayerNorm(scratch, x, nullptr, rows, ln));
  return static_cast<const float*>(scratch);
}

// x = LN(x + f) (post-norm) or x + f (pre-norm); x: [rows, d].
template <class Ops>
absl::Status FinishSublayer(const Ops& ops, float* x, const float* f, int64_t rows,
                            const typename Ops::NormParams& ln) {
  if (ops.config().normalize_before) return ops.Add(x, f, rows * ops.config().d_model);
  return ops.LayerNorm(x, x, f, rows, ln);
}

// x = wire(x, fc2(act(fc1(in(x))))), with a.y and a.hidden as scratch.
template <class Ops>
absl::Status FeedForward(const Ops& ops, float* x, int64_t rows,
                         const typename Ops::LinearParams& fc1,
                         const typename Ops::LinearParams& fc2,
                         const typename Ops::NormParams& ln, const Activations& a) {
  TNMT_ASSIGN_OR_RETURN(const float* in, SublayerInput(ops, x, a.y, rows, ln));
  TNMT_RETURN_IF_ERROR(ops.Linear(a.hidden, in, rows, fc1, /*activate=*/true));
  TNMT_RETURN_IF_ERROR(ops.Linear(a.y, a.hidden, rows, fc2, /*activate=*/false));
  return FinishSublayer(ops, x, a.y, rows, ln);
}

// The encoder over `rows` source positions into a.x: [rows, d]. ids, positions: [rows].
// self_args: the self-attention of those rows over their sentences' keys, which are read from
// a.qkv: key j of K/V group g at row (g * kv_group_stride + j * ld_kv) / (3d) of a.qkv, i.e.
// kv_group_stride and ld_kv in elements of a.qkv's [rows, 3d] layout (the kernels'
// MultiHeadAttention contract): a padded batch, or the sentences' positions packed one after
// another with no padding rows to compute (source_plan.h's EncodePlanned).
template <class Ops>
absl::Status EncodeRows(const Ops& ops, const Activations& a, const int32_t* ids,
                        const int32_t* positions, int64_t rows, const AttentionArgs& self_args,
                        int64_t kv_group_stride, int64_t ld_kv) {
  static_assert(CheckLayerOps<Ops>());
  const ModelConfig& c = ops.config();
  const int d = c.d_model;
  TNMT_RETURN_IF_ERROR(ops.Embed(a.x, ids, positions, rows, /*decoder=*/false));
  for (const auto& l : ops.weights().encoder) {
    TNMT_ASSIGN_OR_RETURN(const float* in, SublayerInput(ops, a.x, a.y, rows, l.self_ln));
    TNMT_RETURN_IF_ERROR(ops.Linear(a.qkv, in, rows, l.self_qkv, false));
    TNMT_RETURN_IF_ERROR(ops.Attention(a.attn, d, a.qkv, 3 * d, a.qkv + d, a.qkv + 2 * d, ld_kv,
                                       kv_group_stride, self_args));
    TNMT_RETURN_IF_ERROR(ops.Linear(a.y, a.attn, rows, l.self_out, false));
    TNMT_RETURN_IF_ERROR(FinishSublayer(ops, a.x, a.y, rows, l.self_ln));
    TNMT_RETURN_IF_ERROR(FeedForward(ops, a.x, rows, l.fc1, l.fc2, l.final_ln, a));
  }
  if (c.normalize_before) {
    TNMT_RETURN_IF_ERROR(ops.LayerNorm(a.x, a.x, nullptr, rows, ops.weights().encoder_final_ln));
  }
  return absl::OkStatus();
}

// Cross-attention K/V of the encoder output enc: [rows, d], every decoder layer: row
// src_rows[i] of K|V ([rows, 2d]) goes to slot slots[i] of cache.cross_pool(layer) ([slots, 2d]),
// i < count. scratch: [rows, 2d].
template <class Ops, class Cache>
absl::Status CrossKeysValues(const Ops& ops, const float* enc, int64_t rows, float* scratch,
                             const int32_t* slots, const int32_t* src_rows, int64_t count,
                             Cache& cache) {
  static_assert(CheckLayerOps<Ops>());
  const int d2 = 2 * ops.config().d_model;
  const auto& layers = ops.weights().decoder;
  for (size_t li = 0; li < layers.size(); ++li) {
    TNMT_RETURN_IF_ERROR(ops.Linear(scratch, enc, rows, layers[li].cross_kv, false));
    TNMT_RETURN_IF_ERROR(ops.ScatterRows(cache.cross_pool(li), d2, slots, scratch, d2, src_rows, count, d2));
  }
  return absl::OkStatus();
}

// The decoder over `rows` query rows (new positions of the decoded rows) into a.x, then the
// logits: [rows, vocab] (when logits is not null). ids, positions: [rows]. The cache gives,
// per decoder layer li, the self-attention pool cache.self_pool(li) and the cross pool
// cache.cross_pool(li) ([slots, 2d] float32 each: K then V), the slot of each query row's new
// K/V (cache.new_slots(): [rows]), and the attention arguments through those pools
// (cache.self_args(), cache.cross_args(); ld_kv = 0, one slot per stored group).
// cache.AfterCrossAttention(li, q, args) runs after each layer's cross-attention with its
// queries (alignments; a no-op returning OkStatus where not needed).
template <class Ops, class Cache>
absl::Status DecodeStep(const Ops& ops, const Activations& a, const int32_t* ids,
                        const int32_t* positions, int64_t rows, Cache& cache, float* logits) {
  static_assert(CheckLayerOps<Ops>());
  static_assert(CheckStepCache<Cache>());
  const ModelConfig& c = ops.config();
  const int d = c.d_model;
  TNMT_RETURN_IF_ERROR(ops.Embed(a.x, ids, positions, rows, /*decoder=*/true));
  const AttentionArgs& self_args = cache.self_args();
  const AttentionArgs& cross_args = cache.cross_args();
  const auto& layers = ops.weights().decoder;
  for (size_t li = 0; li < layers.size(); ++li) {
    const auto& l = layers[li];
    // Self-attention over the cache, this call's K/V (columns d:3d of qkv) written first.
    TNMT_ASSIGN_OR_RETURN(const float* in, SublayerInput(ops, a.x, a.y, rows, l.self_ln));
    TNMT_RETURN_IF_ERROR(ops.Linear(a.qkv, in, rows, l.self_qkv, false));
    float* self = cache.self_pool(li);
    TNMT_RETURN_IF_ERROR(ops.ScatterRows(self, 2 * d, cache.new_slots(), a.qkv + d, 3 * d, nullptr,
                                         rows, 2 * d));
    TNMT_RETURN_IF_ERROR(ops.Attention(a.attn, d, a.qkv, 3 * d, self, self + d, 0, 2 * d, self_args));
    TNMT_RETURN_IF_ERROR(ops.Linear(a.y, a.attn, rows, l.self_out, false));
    TNMT_RETURN_IF_ERROR(FinishSublayer(ops, a.x, a.y, rows, l.self_ln));
    // Cross-attention over the source.
    TNMT_ASSIGN_OR_RETURN(in, SublayerInput(ops, a.x, a.y, rows, l.cross_ln));
    TNMT_RETURN_IF_ERROR(ops.Linear(a.cq, in, rows, l.cross_q, false));
    const float* kv = cache.cross_pool(li);
    TNMT_RETURN_IF_ERROR(ops.Attention(a.attn, d, a.cq, d, kv, kv + d, 0, 2 * d, cross_args));
    TNMT_RETURN_IF_ERROR(cache.AfterCrossAttention(li, a.cq, cross_args));
    TNMT_RETURN_IF_ERROR(ops.Linear(a.y, a.attn, rows, l.cross_out, false));
    TNMT_RETURN_IF_ERROR(FinishSublayer(ops, a.x, a.y, rows, l.cross_ln));
    TNMT_RETURN_IF_ERROR(FeedForward(ops, a.x, rows, l.fc1, l.fc2, l.final_ln, a));
  }
  if (c.normalize_before) {
    TNMT_RETURN_IF_ERROR(ops.LayerNorm(a.x, a.x, nullptr, rows, ops.weights().decoder_final_ln));
  }
  if (logits == nullptr) return absl::OkStatus();
  return ops.Logits(logits, a.x, rows);
}

}  // namespace tnmt::graph
