// Decoder forward on the CPU (the graph's DecodeStep, engine/graph/transformer.h, over
// CpuLayerOps) and its KV cache; see decoder.h.
#include "engine/layers/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/graph/step_plan.h"
#include "engine/graph/transformer.h"
#include "engine/layers/cpu_layer_ops.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/step_ops.h"

namespace tnmt {

namespace k = kernels::cpu;

absl::Status DecoderState::GrowPool(std::vector<Tensor>& pool, int old_capacity,
                                    int new_capacity) {
  // One layer at a time, so the peak is the pool plus one grown layer (not two pools). A
  // failure part way leaves some layers larger, each holding its first old_capacity slots:
  // consistent with the index, which keeps the old capacity.
  const int64_t d2 = 2 * static_cast<int64_t>(c_->d_model);
  for (Tensor& layer : pool) {
    TNMT_ASSIGN_OR_RETURN(Tensor bigger, Tensor::Empty({new_capacity, d2}));
    // Over the compute threads: the copy (and the page faults of the new memory) would
    // otherwise keep the others waiting.
    if (old_capacity > 0) {
      const float* from = layer.f32();
      float* to = bigger.f32();
      k::ParallelForLarge(old_capacity, d2, [&](int64_t begin, int64_t end) {
        std::memcpy(to + begin * d2, from + begin * d2, sizeof(float) * (end - begin) * d2);
      });
    }
    layer = std::move(bigger);
  }
  return absl::OkStatus();
}

absl::Status DecoderState::Reserve(graph::KvIndex::PoolId pool, int64_t more) {
  std::vector<Tensor>& storage = pool == graph::KvIndex::kSelf ? self_ : cross_;
  return index_.Reserve(pool, more, [&](int old_capacity, int new_capacity) {
    return GrowPool(storage, old_capacity, new_capacity);
  });
}

absl::StatusOr<DecoderState> DecoderState::Create(const ModelConfig& c, const ModelWeights& w,
                                                  int max_steps, int row_hint) {
  if (max_steps < 1 || max_steps > MaxPositions(c)) {
    return absl::InvalidArgumentError(absl::StrCat("decoding ", max_steps,
                                                   " positions: outside the model's limit of ",
                                                   MaxPositions(c)));
  }
  DecoderState s;
  s.c_ = &c;
  s.w_ = &w;
  s.max_steps_ = max_steps;
  s.self_.resize(w.decoder.size());
  s.cross_.resize(w.decoder.size());
  if (row_hint > 0) {
    TNMT_RETURN_IF_ERROR(s.Reserve(graph::KvIndex::kSelf,
                                   static_cast<int64_t>(row_hint) * std::min(max_steps, 64)));
    s.tables_.Reserve(static_cast<size_t>(row_hint) * max_steps);
    s.spare_tables_.Reserve(static_cast<size_t>(row_hint) * max_steps);
  }
  return s;
}

absl::StatusOr<DecoderState> DecoderState::Create(const ModelConfig& c, const ModelWeights& w,
                                                  const Tensor& encoder_out,
                                                  const int32_t* src_lengths, int row_hint,
                                                  int max_steps) {
  TNMT_ASSIGN_OR_RETURN(DecoderState s, Create(c, w, max_steps, row_hint));
  TNMT_RETURN_IF_ERROR(s.AddSources(encoder_out, src_lengths).status());
  return s;
}

absl::StatusOr<std::vector<int32_t>> DecoderState::AddSources(const Tensor& encoder_out,
                                                              const int32_t* src_lengths) {
  const int batch = static_cast<int>(encoder_out.dim(0));
  const int src_max = static_cast<int>(encoder_out.dim(1));
  if (encoder_out.dim(2) != c_->d_model) return absl::InvalidArgumentError("encoder output width is not d_model");
  return AddSourcesFrom(encoder_out.f32(), static_cast<int64_t>(batch) * src_max, src_lengths, batch, src_max,
                        [src_max](int b, int j) { return b * src_max + j; });
}

absl::StatusOr<std::vector<int32_t>> DecoderState::AddSourceRows(const Tensor& encoder_rows,
                                                                 const int32_t* src_lengths, int batch) {
  if (encoder_rows.shape().size() != 2 || encoder_rows.dim(1) != c_->d_model) {
    return absl::InvalidArgumentError("encoder rows are not [rows, d_model]");
  }
  std::vector<int32_t> offsets(static_cast<size_t>(std::max(batch, 0)) + 1, 0);
  int src_max = 0;
  for (int b = 0; b < batch; ++b) {
    offsets[b + 1] = offsets[b] + std::max(src_lengths[b], 0);
    src_max = std::max(src_max, src_lengths[b]);
  }
  if (offsets[batch] != encoder_rows.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat("encoder rows: ", encoder_rows.dim(0), " rows for ",
                                                   offsets[batch], " source positions"));
  }
  return AddSourcesFrom(encoder_rows.f32(), encoder_rows.dim(0), src_lengths, batch, src_max,
                        [&offsets](int b, int j) { return offsets[b] + j; });
}

template <class RowOf>
absl::StatusOr<std::vector<int32_t>> DecoderState::AddSourcesFrom(const float* enc, int64_t enc_rows,
                                                                  const int32_t* src_lengths, int batch,
                                                                  int src_max, RowOf row_of) {
  const int d = c_->d_model;
  TNMT_ASSIGN_OR_RETURN(const int64_t total,
                        graph::KvIndex::SourcePositions(src_lengths, batch, src_max));
  // Memory first: a failure before AddSources leaves the state as it was.
  TNMT_ASSIGN_OR_RETURN(Tensor kv, Tensor::Empty({enc_rows, 2 * d}));
  TNMT_RETURN_IF_ERROR(Reserve(graph::KvIndex::kCross, total));
  TNMT_ASSIGN_OR_RETURN(std::vector<int32_t> ids, index_.AddSources(src_lengths, batch, src_max));
  // Every valid source position's K/V into its slot.
  std::vector<int32_t> slots, rows;
  slots.reserve(total);
  rows.reserve(total);
  for (int b = 0; b < batch; ++b) {
    for (int j = 0; j < src_lengths[b]; ++j) {
      slots.push_back(index_.src_slot(ids[b], j));
      rows.push_back(row_of(b, j));
    }
  }
  struct {
    std::vector<Tensor>* pool;
    float* cross_pool(size_t layer) { return (*pool)[layer].f32(); }
  } cache{&cross_};
  TNMT_RETURN_IF_ERROR(graph::CrossKeysValues(CpuLayerOps(*c_, *w_), enc, enc_rows, kv.f32(), slots.data(),
                                              rows.data(), total, cache));
  return ids;
}

absl::Status DecoderState::ReleaseSource(int32_t source) { return index_.ReleaseSource(source); }

int DecoderState::steps() const {
  int m = 0;
  for (int p : index_.row_pos()) m = std::max(m, p);
  return m;
}

int64_t DecoderState::slots_in_use() const {
  using graph::KvIndex;
  return static_cast<int64_t>(index_.capacity(KvIndex::kSelf)) - index_.free_slots(KvIndex::kSelf) +
         index_.capacity(KvIndex::kCross) - index_.free_slots(KvIndex::kCross);
}

absl::Status DecoderState::Start(std::vector<int32_t> kv_index) { return index_.Reorder({}, kv_index); }

absl::Status DecoderState::Reorder(const std::vector<int32_t>& parents,
                                   const std::vector<int32_t>& new_sources) {
  return index_.Reorder(parents, new_sources);
}

absl::Status DecoderForward(const ModelConfig& c, const ModelWeights& w, DecoderState* s,
                            const int32_t* ids, int t_new, float* logits, Workspace* ws,
                            const float** hidden_out) {
  const int d = c.d_model;
  const int n = s->rows();
  if (hidden_out != nullptr) *hidden_out = nullptr;
  if (n == 0) return absl::OkStatus();
  const int64_t rows = static_cast<int64_t>(n) * t_new;
  // Scratch first: a failure before PlanStep leaves the state as it was.
  graph::Activations a;
  TNMT_ASSIGN_OR_RETURN(a.x, ws->Get(Workspace::kX, rows * d));
  TNMT_ASSIGN_OR_RETURN(a.y, ws->Get(Workspace::kY, rows * d));
  TNMT_ASSIGN_OR_RETURN(a.qkv, ws->Get(Workspace::kQkv, rows * 3 * d));
  TNMT_ASSIGN_OR_RETURN(a.attn, ws->Get(Workspace::kAttn, rows * d));
  TNMT_ASSIGN_OR_RETURN(a.cq, ws->Get(Workspace::kCrossQ, rows * d));
  TNMT_ASSIGN_OR_RETURN(a.hidden, ws->Get(Workspace::kHidden, rows * c.d_ff));
  graph::KvIndex& index = s->index_;
  graph::StepPlan& plan = s->plan_;
  std::vector<int32_t> no_padding;
  TNMT_RETURN_IF_ERROR(graph::PlanStep(
      index, t_new, n, s->max_steps_,
      [s](int old_capacity, int new_capacity) { return s->GrowPool(s->self_, old_capacity, new_capacity); },
      &no_padding, &plan));
  // The rows' slot tables after the reorders since the last call, with the first new slot
  // (kernels ReorderSlotTables, as on the GPU); then any further new positions.
  s->spare_tables_.Reserve(static_cast<size_t>(n) * s->max_steps_);
  k::ReorderSlotTables(s->spare_tables_.data(), s->tables_.data(), s->max_steps_, plan.map.data(),
                       plan.pos.data(), plan.first_slot.data(), n);
  std::swap(s->tables_, s->spare_tables_);
  index.TablesGathered();
  for (int r = 0; r < n; ++r) {
    for (int i = 1; i < t_new; ++i) {
      s->tables_[static_cast<int64_t>(r) * s->max_steps_ + plan.pos[r] + i] =
          plan.slots[static_cast<int64_t>(r) * t_new + i];
    }
  }
  const graph::StepAttention args =
      graph::PlanAttention(c, plan, s->max_steps_, s->tables_.data(), plan.valid.data(), plan.sources.data(),
                           index.src_lengths().data(), index.src_slots().data(), index.src_stride(),
                           /*fixed_bounds=*/false);
  // The graph's view of this state's pools; alignments after the cross-attention.
  struct Pools {
    DecoderState* s;
    float* self_pool(size_t layer) { return s->self_[layer].f32(); }
    float* cross_pool(size_t layer) { return s->cross_[layer].f32(); }
  } pools{s};
  auto align = [s, d](size_t layer, const float* q, const k::AttentionArgs& args) {
    for (size_t i = 0; i < s->alignment_layers_.size(); ++i) {
      if (s->alignment_layers_[i] != static_cast<int>(layer)) continue;
      s->alignments_.resize(s->alignment_layers_.size());
      s->alignments_[i].resize(static_cast<size_t>(args.batch) * args.q_len);
      const float* kv = s->cross_[layer].f32();
      k::AttentionArgmax(s->alignments_[i].data(), q, d, kv, 0, 2 * d, args);
    }
    return absl::OkStatus();
  };
  graph::StepCache cache(pools, plan.slots.data(), args, align);
  TNMT_RETURN_IF_ERROR(graph::DecodeStep(CpuLayerOps(c, w), a, ids, plan.positions.data(), rows, cache, logits));
  index.Advance(t_new);
  if (hidden_out != nullptr) *hidden_out = a.x;
  return absl::OkStatus();
}

}  // namespace tnmt
