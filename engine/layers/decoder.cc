// Decoder forward on the CPU (the graph's DecodeStep, engine/graph/transformer.h, over
// CpuLayerOps) and its KV cache; see decoder.h.
#include "engine/layers/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/graph/transformer.h"
#include "engine/layers/cpu_layer_ops.h"
#include "kernels/cpu/attention.h"

namespace tnmt {

namespace k = kernels::cpu;

absl::Status DecoderState::SlotPool::Reserve(int more) {
  if (static_cast<int>(free.size()) >= more) return absl::OkStatus();
  const int64_t need = static_cast<int64_t>(capacity) + more - static_cast<int64_t>(free.size());
  const int64_t grown = std::max<int64_t>(need, std::max<int64_t>(64, 2 * static_cast<int64_t>(capacity)));
  if (grown > std::numeric_limits<int32_t>::max()) return absl::ResourceExhaustedError("KV cache too large");
  for (Tensor& t : layers) {
    TNMT_ASSIGN_OR_RETURN(Tensor bigger, Tensor::Empty({grown, d2}));
    if (capacity > 0) std::memcpy(bigger.f32(), t.f32(), sizeof(float) * capacity * d2);
    t = std::move(bigger);
  }
  // Lowest new ids are handed out first (free is a stack).
  for (int64_t id = grown - 1; id >= capacity; --id) free.push_back(static_cast<int32_t>(id));
  capacity = static_cast<int>(grown);
  return absl::OkStatus();
}

absl::StatusOr<int32_t> DecoderState::SlotPool::Alloc() {
  TNMT_RETURN_IF_ERROR(Reserve(1));
  const int32_t id = free.back();
  free.pop_back();
  return id;
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
  s.self_.d2 = s.cross_.d2 = 2 * c.d_model;
  s.self_.layers.resize(w.decoder.size());
  s.cross_.layers.resize(w.decoder.size());
  if (row_hint > 0) {
    TNMT_RETURN_IF_ERROR(s.self_.Reserve(row_hint * std::min(max_steps, 64)));
    s.tables_.reserve(static_cast<size_t>(row_hint) * max_steps);
    s.spare_tables_.reserve(static_cast<size_t>(row_hint) * max_steps);
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
  const int d = c_->d_model;
  const int batch = static_cast<int>(encoder_out.dim(0));
  const int src_max = static_cast<int>(encoder_out.dim(1));
  if (encoder_out.dim(2) != d) return absl::InvalidArgumentError("encoder output width is not d_model");
  int total = 0;
  for (int b = 0; b < batch; ++b) {
    if (src_lengths[b] < 1 || src_lengths[b] > src_max) {
      return absl::InvalidArgumentError(absl::StrCat("source length ", src_lengths[b], " outside [1, ", src_max, "]"));
    }
    total += src_lengths[b];
  }
  if (src_max > src_stride_) {  // widen the per-source slot tables
    std::vector<int32_t> wider(sources_.size() * src_max, 0);
    for (size_t i = 0; i < sources_.size(); ++i) {
      std::copy_n(src_slots_.begin() + i * src_stride_, src_stride_, wider.begin() + i * src_max);
    }
    src_slots_ = std::move(wider);
    src_stride_ = src_max;
  }
  TNMT_RETURN_IF_ERROR(cross_.Reserve(total));
  std::vector<int32_t> ids(batch);
  for (int b = 0; b < batch; ++b) {
    int32_t id;
    if (!free_sources_.empty()) {
      id = free_sources_.back();
      free_sources_.pop_back();
    } else {
      id = static_cast<int32_t>(sources_.size());
      sources_.emplace_back();
      src_lengths_.push_back(0);
      src_slots_.resize(sources_.size() * src_stride_, 0);
    }
    sources_[id].live = true;
    src_lengths_[id] = src_lengths[b];
    for (int j = 0; j < src_lengths[b]; ++j) {
      TNMT_ASSIGN_OR_RETURN(src_slots_[static_cast<int64_t>(id) * src_stride_ + j], cross_.Alloc());
    }
    ids[b] = id;
    ++live_sources_;
  }
  // Every valid source position's K/V into its slot.
  std::vector<int32_t> slots, rows;
  slots.reserve(total);
  rows.reserve(total);
  for (int b = 0; b < batch; ++b) {
    for (int j = 0; j < src_lengths[b]; ++j) {
      slots.push_back(src_slots_[static_cast<int64_t>(ids[b]) * src_stride_ + j]);
      rows.push_back(b * src_max + j);
    }
  }
  const int64_t src_rows = static_cast<int64_t>(batch) * src_max;
  TNMT_ASSIGN_OR_RETURN(Tensor kv, Tensor::Empty({src_rows, 2 * d}));
  struct {
    SlotPool* pool;
    float* cross_pool(size_t layer) { return pool->layers[layer].f32(); }
  } cache{&cross_};
  TNMT_RETURN_IF_ERROR(graph::CrossKeysValues(CpuLayerOps(*c_, *w_), encoder_out.f32(), src_rows,
                                              kv.f32(), slots.data(), rows.data(), total, cache));
  return ids;
}

absl::Status DecoderState::ReleaseSource(int32_t source) {
  if (source < 0 || source >= static_cast<int32_t>(sources_.size()) || !sources_[source].live) {
    return absl::InvalidArgumentError(absl::StrCat("DecoderState: no live source ", source));
  }
  for (int32_t s : row_source_) {
    if (s == source) return absl::FailedPreconditionError("DecoderState: source still has live rows");
  }
  Source& src = sources_[source];
  self_.free.insert(self_.free.end(), src.self_slots.begin(), src.self_slots.end());
  for (int j = 0; j < src_lengths_[source]; ++j) cross_.free.push_back(src_slots_[static_cast<int64_t>(source) * src_stride_ + j]);
  src = Source{};
  src_lengths_[source] = 0;
  free_sources_.push_back(source);
  --live_sources_;
  return absl::OkStatus();
}

int DecoderState::steps() const {
  int m = 0;
  for (int p : row_pos_) m = std::max(m, p);
  return m;
}

int64_t DecoderState::slots_in_use() const {
  return static_cast<int64_t>(self_.capacity) - self_.free.size() + cross_.capacity - cross_.free.size();
}

absl::Status DecoderState::Start(std::vector<int32_t> kv_index) {
  row_source_.clear();
  row_pos_.clear();
  return Reorder({}, kv_index);
}

absl::Status DecoderState::Reorder(const std::vector<int32_t>& parents,
                                   const std::vector<int32_t>& new_sources) {
  const int old_rows = rows();
  for (int32_t p : parents) {
    if (p < 0 || p >= old_rows) return absl::InvalidArgumentError("DecoderState::Reorder: bad parent");
  }
  for (int32_t s : new_sources) {
    if (s < 0 || s >= static_cast<int32_t>(sources_.size()) || !sources_[s].live) {
      return absl::InvalidArgumentError(absl::StrCat("DecoderState::Reorder: no live source ", s));
    }
  }
  const size_t n = parents.size() + new_sources.size();
  spare_tables_.resize(n * max_steps_);
  spare_source_.resize(n);
  spare_pos_.resize(n);
  for (size_t i = 0; i < parents.size(); ++i) {
    const int32_t p = parents[i];
    std::copy_n(tables_.begin() + static_cast<int64_t>(p) * max_steps_, row_pos_[p],
                spare_tables_.begin() + static_cast<int64_t>(i) * max_steps_);
    spare_source_[i] = row_source_[p];
    spare_pos_[i] = row_pos_[p];
  }
  for (size_t i = 0; i < new_sources.size(); ++i) {
    spare_source_[parents.size() + i] = new_sources[i];
    spare_pos_[parents.size() + i] = 0;
  }
  std::swap(tables_, spare_tables_);
  std::swap(row_source_, spare_source_);
  std::swap(row_pos_, spare_pos_);
  return absl::OkStatus();
}

absl::Status DecoderForward(const ModelConfig& c, const ModelWeights& w, DecoderState* s,
                            const int32_t* ids, int t_new, float* logits, Workspace* ws) {
  const int d = c.d_model;
  const int n = s->rows();
  if (n == 0) return absl::OkStatus();
  const int start = s->row_pos_[0];
  int furthest = 0, src_longest = 0;
  for (int r = 0; r < n; ++r) {
    const int p = s->row_pos_[r];
    if (t_new > 1 && p != start) {
      return absl::InvalidArgumentError("DecoderForward: several positions at once need rows at the same position");
    }
    if (p + t_new > s->max_steps_) {
      return absl::OutOfRangeError(absl::StrCat("decoder cache holds ", s->max_steps_,
                                                " positions; position ", p + t_new, " requested"));
    }
    furthest = std::max(furthest, p + t_new);
    src_longest = std::max(src_longest, s->src_lengths_[s->row_source_[r]]);
  }
  const int64_t rows = static_cast<int64_t>(n) * t_new;
  TNMT_ASSIGN_OR_RETURN(float* x, ws->Get(Workspace::kX, rows * d));
  TNMT_ASSIGN_OR_RETURN(float* y, ws->Get(Workspace::kY, rows * d));
  TNMT_ASSIGN_OR_RETURN(float* qkv, ws->Get(Workspace::kQkv, rows * 3 * d));
  TNMT_ASSIGN_OR_RETURN(float* attn, ws->Get(Workspace::kAttn, rows * d));
  TNMT_ASSIGN_OR_RETURN(float* cq, ws->Get(Workspace::kCrossQ, rows * d));
  TNMT_ASSIGN_OR_RETURN(float* hidden, ws->Get(Workspace::kHidden, rows * c.d_ff));
  // New slots for the positions this call writes, charged to each row's source.
  TNMT_RETURN_IF_ERROR(s->self_.Reserve(static_cast<int>(rows)));
  std::vector<int32_t> positions(rows), slots(rows);
  s->valid_.resize(n);
  for (int r = 0; r < n; ++r) {
    std::vector<int32_t>& owned = s->sources_[s->row_source_[r]].self_slots;
    for (int i = 0; i < t_new; ++i) {
      const int p = s->row_pos_[r] + i;
      TNMT_ASSIGN_OR_RETURN(const int32_t slot, s->self_.Alloc());
      owned.push_back(slot);
      s->tables_[static_cast<int64_t>(r) * s->max_steps_ + p] = slot;
      positions[static_cast<int64_t>(r) * t_new + i] = p;
      slots[static_cast<int64_t>(r) * t_new + i] = slot;
    }
    s->valid_[r] = s->row_pos_[r] + t_new;
  }
  // Every K/V is addressed through a slot table (ld_kv = 0: one slot per stored group).
  k::AttentionArgs self_args = graph::ModelAttention(c);
  self_args.batch = n;
  self_args.q_len = t_new;
  self_args.k_len = furthest;
  self_args.k_valid = s->valid_.data();
  self_args.causal_offset = t_new > 1 ? start : -1;  // one new position: k_valid suffices
  self_args.k_groups = s->tables_.data();
  self_args.k_groups_stride = s->max_steps_;
  k::AttentionArgs cross_args = self_args;
  cross_args.k_len = src_longest;
  cross_args.causal_offset = -1;
  cross_args.kv_index = s->row_source_.data();
  cross_args.k_valid = s->src_lengths_.data();
  cross_args.k_groups = s->src_slots_.data();
  cross_args.k_groups_stride = s->src_stride_;

  // The graph's view of this state's pools.
  struct Cache {
    DecoderState* s;
    const int32_t* slots;
    const k::AttentionArgs& self;
    const k::AttentionArgs& cross_attention;
    float* self_pool(size_t layer) { return s->self_.layers[layer].f32(); }
    const int32_t* new_slots() const { return slots; }
    const k::AttentionArgs& self_args() const { return self; }
    const k::AttentionArgs& cross_args() const { return cross_attention; }
    float* cross_pool(size_t layer) { return s->cross_.layers[layer].f32(); }
    absl::Status AfterCrossAttention(size_t layer, const float* q, const k::AttentionArgs& args) {
      const int d = s->c_->d_model;
      for (size_t a = 0; a < s->alignment_layers_.size(); ++a) {
        if (s->alignment_layers_[a] != static_cast<int>(layer)) continue;
        s->alignments_.resize(s->alignment_layers_.size());
        s->alignments_[a].resize(static_cast<size_t>(args.batch) * args.q_len);
        const float* kv = cross_pool(layer);
        k::AttentionArgmax(s->alignments_[a].data(), q, d, kv, 0, 2 * d, args);
      }
      return absl::OkStatus();
    }
  };
  Cache cache{s, slots.data(), self_args, cross_args};
  graph::Activations a;
  a.x = x;
  a.y = y;
  a.qkv = qkv;
  a.attn = attn;
  a.cq = cq;
  a.hidden = hidden;
  TNMT_RETURN_IF_ERROR(
      graph::DecodeStep(CpuLayerOps(c, w), a, ids, positions.data(), rows, cache, logits));
  for (int r = 0; r < n; ++r) s->row_pos_[r] += t_new;
  return absl::OkStatus();
}

}  // namespace tnmt
