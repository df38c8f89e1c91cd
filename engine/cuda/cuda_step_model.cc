// CudaStepModel; see cuda_step_model.h. Host bookkeeping mirrors engine/layers/decoder.cc
// (DecoderState) step for step, so slot ids, reuse and errors behave as on the CPU.
// Timing (TNMT_GPU_TIMING=1): the layer operations time their kernels by category
// (device_layers.cc); here the copies, the top-k, the slot tables, a replayed graph as a whole,
// and the host's part of each call (step_timing.h).
#include "engine/cuda/cuda_step_model.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/graph/source_plan.h"
#include "engine/graph/step_plan.h"
#include "kernels/cuda/step_ops.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/topk.h"

namespace tnmt {

namespace kc = kernels::cuda;
using cuda_engine::Activations;

absl::StatusOr<std::unique_ptr<CudaStepModel>> CudaStepModel::Create(
    std::shared_ptr<const cuda_engine::DeviceWeights> weights, const CudaStepOptions& options) {
  if (weights == nullptr) return absl::InvalidArgumentError("CudaStepModel: no weights");
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<kc::Context> ctx, kc::Context::Create(weights->device()));
  return std::unique_ptr<CudaStepModel>(
      new CudaStepModel(std::move(weights), std::move(ctx), options));
}

CudaStepModel::CudaStepModel(std::shared_ptr<const cuda_engine::DeviceWeights> weights,
                             std::unique_ptr<kc::Context> ctx, const CudaStepOptions& options)
    : w_(std::move(weights)),
      c_(w_->config()),
      ctx_(std::move(ctx)),
      max_steps_(w_->position_rows),
      options_(options) {
  self_.width = cross_.width = 2 * static_cast<int64_t>(c_.d_model);
  self_.layers.resize(w_->decoder.size());
  cross_.layers.resize(w_->decoder.size());
}

CudaStepModel::~CudaStepModel() {
  // Nothing may still read or write a buffer (device or pinned) when it is freed.
  (void)ctx_->Activate();
  (void)ctx_->Synchronize();
}

kc::DeviceAllocator::Stats CudaStepModel::memory_stats() const { return ctx_->allocator().stats(); }

int64_t CudaStepModel::slots_in_use() const {
  using graph::KvIndex;
  return static_cast<int64_t>(index_.capacity(KvIndex::kSelf)) - index_.free_slots(KvIndex::kSelf) -
         static_cast<int64_t>(pad_slots_.size()) + index_.capacity(KvIndex::kCross) -
         index_.free_slots(KvIndex::kCross);
}

absl::Status CudaStepModel::EnsureBuffer(kc::DeviceBuffer& buffer, size_t bytes, const char* what) {
  if (buffer.bytes() >= bytes) return absl::OkStatus();
  buffer.Reset();  // stream order makes the old block safe to reuse at once
  absl::StatusOr<kc::DeviceBuffer> b = ctx_->allocator().Buffer(bytes);
  if (!b.ok()) {
    return absl::Status(b.status().code(),
                        absl::StrCat(what, " needs ", bytes, " bytes: ", b.status().message()));
  }
  buffer = *std::move(b);
  return absl::OkStatus();
}

graph::KvIndex::Grow CudaStepModel::GrowPool(graph::KvIndex::PoolId id) {
  Pool& p = id == graph::KvIndex::kSelf ? self_ : cross_;
  const char* name = id == graph::KvIndex::kSelf ? "self-attention" : "cross-attention";
  return [this, &p, name](int old_capacity, int new_capacity) -> absl::Status {
    const int64_t bytes = static_cast<int64_t>(new_capacity) * p.width * static_cast<int64_t>(sizeof(float));
    std::vector<kc::DeviceBuffer> bigger(p.layers.size());
    for (kc::DeviceBuffer& b : bigger) {
      absl::StatusOr<kc::DeviceBuffer> got = ctx_->allocator().Buffer(static_cast<size_t>(bytes));
      if (!got.ok()) {
        return absl::Status(got.status().code(),
                            absl::StrCat(name, " KV cache of ", new_capacity, " slots needs ", bytes,
                                         " bytes per layer (", p.layers.size(), " layers): ",
                                         got.status().message()));
      }
      b = *std::move(got);
    }
    if (old_capacity > 0) {
      const size_t old_bytes = static_cast<size_t>(old_capacity) * p.width * sizeof(float);
      for (size_t i = 0; i < p.layers.size(); ++i) {
        TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaMemcpyAsync(bigger[i].get(), p.layers[i].get(),
                                                             old_bytes, cudaMemcpyDeviceToDevice,
                                                             ctx_->stream())));
      }
    }
    p.layers.swap(bigger);  // the old blocks go back to the cache; stream order protects them
    return absl::OkStatus();
  };
}

absl::Status CudaStepModel::ReleaseSource(int32_t source) { return index_.ReleaseSource(source); }

absl::Status CudaStepModel::Reorder(const std::vector<int32_t>& parents,
                                    const std::vector<int32_t>& new_sources) {
  return index_.Reorder(parents, new_sources);
}

absl::StatusOr<std::vector<int32_t>> CudaStepModel::AddSources(const int32_t* ids,
                                                               const int32_t* lengths, int batch,
                                                               int src_max) {
  timing_.Enter();
  absl::StatusOr<std::vector<int32_t>> r = AddSourcesImpl(ids, lengths, batch, src_max);
  // On failure, work queued before it may still read the staging buffer: wait for it.
  if (!r.ok()) (void)ctx_->Synchronize();
  timing_.Exit("encode: setup, launch and wait", /*step=*/false);
  return r;
}

absl::StatusOr<std::vector<int32_t>> CudaStepModel::AddSourcesImpl(const int32_t* ids,
                                                                   const int32_t* lengths,
                                                                   int batch, int src_max) {
  if (batch < 0) return absl::InvalidArgumentError(absl::StrCat("AddSources: batch ", batch));
  if (batch == 0) return std::vector<int32_t>{};
  if (src_max < 1 || src_max > w_->position_rows) {
    return absl::InvalidArgumentError(absl::StrCat("source of ", src_max,
                                                   " tokens exceeds the model's limit of ",
                                                   w_->position_rows, " positions"));
  }
  // Encoder rows packed without padding (graph::PlanSource, as on the CPU); its ids checked.
  TNMT_ASSIGN_OR_RETURN(const graph::SourcePlan plan, graph::PlanSource(ids, lengths, batch, src_max));
  const int64_t R = plan.rows;
  for (int32_t id : plan.ids) {
    if (id < 0 || id >= c_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("source token id ", id, " outside [0, ", c_.vocab_size, ")"));
    }
  }
  TNMT_RETURN_IF_ERROR(ctx_->Activate());
  // Device memory first: a failure here leaves the model as it was.
  cuda_engine::ActivationBuffer enc;
  TNMT_RETURN_IF_ERROR(enc.Ensure(ctx_->allocator(), c_, w_->dtype(), R, /*decoder=*/false));
  TNMT_RETURN_IF_ERROR(index_.Reserve(graph::KvIndex::kCross, R, GrowPool(graph::KvIndex::kCross)));
  // Upload, [R] each: tokens, positions, K/V groups, keys per group, cross slots.
  const int64_t words = 5 * R;
  TNMT_RETURN_IF_ERROR(upload_.Ensure(static_cast<size_t>(words) * sizeof(int32_t)));
  kc::DeviceBuffer d_in;
  TNMT_RETURN_IF_ERROR(EnsureBuffer(d_in, static_cast<size_t>(words) * sizeof(int32_t), "source upload"));

  // Host bookkeeping, as DecoderState::AddSources.
  TNMT_ASSIGN_OR_RETURN(std::vector<int32_t> out, index_.AddSources(lengths, batch, src_max));
  int32_t* h = upload_.as<int32_t>();
  std::copy(plan.ids.begin(), plan.ids.end(), h);
  std::copy(plan.positions.begin(), plan.positions.end(), h + R);
  std::copy(plan.group.begin(), plan.group.end(), h + 2 * R);
  std::copy(plan.valid.begin(), plan.valid.end(), h + 3 * R);
  int32_t* h_slots = h + 4 * R;
  int64_t t = 0;
  for (int b = 0; b < batch; ++b) {
    for (int j = 0; j < lengths[b]; ++j) h_slots[t++] = index_.src_slot(out[b], j);
  }
  src_dirty_ = true;

  auto device_work = [&]() -> absl::Status {
    TNMT_RETURN_IF_ERROR(kc::Timed(*ctx_, kernels::TimeCategory::kCopy, [&] {
      return TNMT_CUDA_CHECK(cudaMemcpyAsync(d_in.get(), h, static_cast<size_t>(words) * sizeof(int32_t),
                                             cudaMemcpyHostToDevice, ctx_->stream()));
    }));
    const int32_t* d = d_in.as<int32_t>();
    const Activations& a = enc.get();
    const cuda_engine::CudaLayerOps ops(*ctx_, *w_, a.half);
    TNMT_RETURN_IF_ERROR(graph::EncodePlanned(ops, a, plan, d, d + R, d + 2 * R, d + 3 * R));
    // Cross-attention K/V of every source position (encoder row r), into its slot.
    struct {
      Pool* pool;
      float* cross_pool(size_t layer) { return pool->layers[layer].as<float>(); }
    } cache{&cross_};
    TNMT_RETURN_IF_ERROR(graph::CrossKeysValues(ops, a.x, R, a.qkv, d + 4 * R, /*src_rows=*/nullptr, R, cache));
    return ctx_->Synchronize();
  };
  if (absl::Status s = device_work(); !s.ok()) {
    (void)ctx_->Synchronize();
    for (int32_t id : out) index_.Forget(id);
    return s;
  }
  return out;
}

absl::Status CudaStepModel::Step(const int32_t* ids, int k, StepScores* scores) {
  timing_.Enter();
  absl::Status s = StepImpl(ids, k, scores);
  // On failure, work queued before it may still use the staging buffers: wait for it.
  if (!s.ok()) (void)ctx_->Synchronize();
  timing_.Exit("step: copy-out and host scoring", /*step=*/true);
  return s;
}

namespace {

// Rows a step computes: n itself, or with graphs n rounded up to a bucket, so that a decode's
// shrinking row count reuses a few graphs.
int Bucket(int n, bool graphs) {
  if (!graphs) return n;
  const int64_t unit = n <= 256 ? 16 : 64;
  return static_cast<int>((n + unit - 1) / unit * unit);
}

uint64_t Word(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

}  // namespace

absl::StatusOr<CudaStepModel::DeviceScores> CudaStepModel::StepOnDevice(const int32_t* ids, int k) {
  DeviceScores d;
  timing_.Enter();
  absl::Status s = StepImpl(ids, k, &device_step_, &d);
  if (!s.ok()) (void)ctx_->Synchronize();
  // The caller's selection on the device and its wait come before the next call.
  timing_.Exit("step: setup and launch (scores stay on the device)", /*step=*/true);
  if (!s.ok()) return s;
  return d;
}

absl::Status CudaStepModel::StepImpl(const int32_t* ids, int k, StepScores* s, DeviceScores* on_device) {
  const int n = rows();
  const int V = c_.vocab_size;
  TNMT_RETURN_IF_ERROR(s->Reset(n, k, V));
  TNMT_RETURN_IF_ERROR(s->CheckGather(n, V));
  // Gathered logits (forced decoding) and whole distributions (ensembles) are scored on the
  // host from the downloaded logits, by the CPU engine's ScoreRow: the same scoring code.
  const bool host_scoring = !s->gather_offsets.empty() || s->want_logprobs;
  TNMT_RETURN_IF_ERROR(s->CheckAlignmentLayers(static_cast<int>(w_->decoder.size())));
  if (k > kc::kMaxTopK) {
    return absl::InvalidArgumentError(
        absl::StrCat("step candidates k=", k, " above the CUDA top-k limit of ", kc::kMaxTopK));
  }
  if (n == 0) return absl::OkStatus();
  for (int r = 0; r < n; ++r) {
    if (ids[r] < 0 || ids[r] >= V) {
      return absl::InvalidArgumentError(absl::StrCat("step token id ", ids[r], " of row ", r,
                                                     " outside [0, ", V, ")"));
    }
  }
  const int B = Bucket(n, options_.cuda_graphs);  // rows computed: n real, B - n padding
  TNMT_RETURN_IF_ERROR(ctx_->Activate());
  // Device memory first (nothing below changes the host state before PlanStep).
  TNMT_RETURN_IF_ERROR(act_.Ensure(ctx_->allocator(), c_, w_->dtype(), B, /*decoder=*/true));
  const int spare = 1 - cur_;
  TNMT_RETURN_IF_ERROR(EnsureBuffer(tables_[spare],
                                    static_cast<size_t>(B) * max_steps_ * sizeof(int32_t),
                                    "decoder slot tables"));
  const size_t step_words = 6 * static_cast<size_t>(B);
  TNMT_RETURN_IF_ERROR(EnsureBuffer(step_in_, step_words * sizeof(int32_t), "step inputs"));
  const size_t result_words = static_cast<size_t>(B) * (2 + 2 * static_cast<size_t>(k));
  TNMT_RETURN_IF_ERROR(EnsureBuffer(results_, result_words * sizeof(float), "step results"));
  const bool upload_src = src_dirty_;
  const std::vector<int32_t>& src_lengths = index_.src_lengths();
  const std::vector<int32_t>& src_slots = index_.src_slots();
  if (upload_src) {
    TNMT_RETURN_IF_ERROR(EnsureBuffer(d_src_lengths_, src_lengths.size() * sizeof(int32_t),
                                      "source lengths"));
    TNMT_RETURN_IF_ERROR(EnsureBuffer(d_src_slots_, src_slots.size() * sizeof(int32_t),
                                      "source slot tables"));
  }
  const size_t src_words = upload_src ? src_lengths.size() + src_slots.size() : 0;
  TNMT_RETURN_IF_ERROR(upload_.Ensure((step_words + src_words) * sizeof(int32_t)));
  TNMT_RETURN_IF_ERROR(download_.Ensure(result_words * sizeof(float)));
  const size_t logit_words = host_scoring ? static_cast<size_t>(n) * V : 0;
  if (host_scoring) TNMT_RETURN_IF_ERROR(logits_host_.Ensure(logit_words * sizeof(float)));
  // Alignments: each requested layer's AttentionArgmax after its cross-attention, [layers, B].
  const size_t align_words = s->alignment_layers.size() * static_cast<size_t>(B);
  if (align_words > 0) {
    TNMT_RETURN_IF_ERROR(EnsureBuffer(aligned_, align_words * sizeof(int32_t), "alignments"));
    TNMT_RETURN_IF_ERROR(aligned_host_.Ensure(align_words * sizeof(int32_t)));
  }
  alignment_layers_ = s->alignment_layers;

  // The step's rows, slots and tables (engine/graph/step_plan.h), packed [6, B]: ids,
  // positions, new slots, sources, valid keys, table rows.
  TNMT_RETURN_IF_ERROR(graph::PlanStep(index_, 1, B, max_steps_, GrowPool(graph::KvIndex::kSelf), &pad_slots_, &plan_));
  int32_t* h = upload_.as<int32_t>();
  for (int r = 0; r < B; ++r) h[r] = r < n ? ids[r] : c_.pad_id;
  std::copy(plan_.positions.begin(), plan_.positions.end(), h + B);
  std::copy(plan_.slots.begin(), plan_.slots.end(), h + 2 * B);
  std::copy(plan_.sources.begin(), plan_.sources.end(), h + 3 * B);
  std::copy(plan_.valid.begin(), plan_.valid.end(), h + 4 * B);
  std::copy(plan_.map.begin(), plan_.map.end(), h + 5 * B);
  cudaStream_t stream = ctx_->stream();
  TNMT_RETURN_IF_ERROR(kc::Timed(*ctx_, kernels::TimeCategory::kCopy, [&] {
    return TNMT_CUDA_CHECK(
        cudaMemcpyAsync(step_in_.get(), h, step_words * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  }));
  if (upload_src) {
    int32_t* hs = h + step_words;
    std::copy(src_lengths.begin(), src_lengths.end(), hs);
    std::copy(src_slots.begin(), src_slots.end(), hs + src_lengths.size());
    TNMT_RETURN_IF_ERROR(kc::Timed(*ctx_, kernels::TimeCategory::kCopy, [&] {
      TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaMemcpyAsync(
          d_src_lengths_.get(), hs, src_lengths.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream)));
      return TNMT_CUDA_CHECK(cudaMemcpyAsync(d_src_slots_.get(), hs + src_lengths.size(),
                                             src_slots.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    }));
    src_dirty_ = false;
  }
  int32_t* tables = tables_[spare].as<int32_t>();
  const int32_t* from = tables_[cur_].as<int32_t>();
  if (options_.cuda_graphs && alignment_layers_.empty()) {  // alignments: an eager step
    // Timed as a whole (a graph's kernels cannot be timed apart).
    TNMT_RETURN_IF_ERROR(kc::Timed(*ctx_, kernels::TimeCategory::kGraph, [&] {
      return graphs_.Run(GraphKey(B, k, tables, from), stream, [&]() { return EnqueueStep(B, k, tables, from); });
    }));
  } else {
    TNMT_RETURN_IF_ERROR(EnqueueStep(B, k, tables, from));
  }
  cur_ = spare;
  index_.TablesGathered();  // tables_[cur_] now holds the rows in order
  if (on_device != nullptr) {  // StepOnDevice: results_ stays where the caller reads it
    index_.Advance(1);
    const float* res = results_.as<float>();
    const float* values = res + 2 * static_cast<int64_t>(B);
    *on_device = {n, k, res, res + B, values, reinterpret_cast<const int32_t*>(values + static_cast<int64_t>(B) * k)};
    return absl::OkStatus();
  }
  TNMT_RETURN_IF_ERROR(kc::Timed(*ctx_, kernels::TimeCategory::kCopy, [&] {  // the copy back
    TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaMemcpyAsync(download_.as<float>(), results_.get(),
                                                         result_words * sizeof(float), cudaMemcpyDeviceToHost,
                                                         stream)));
    if (align_words > 0) {
      TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaMemcpyAsync(aligned_host_.as<int32_t>(), aligned_.get(),
                                                           align_words * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                                           stream)));
    }
    if (host_scoring) {  // the first n rows of the logits [B, V]
      TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaMemcpyAsync(logits_host_.as<float>(), act_.get().logits,
                                                           logit_words * sizeof(float), cudaMemcpyDeviceToHost,
                                                           stream)));
    }
    return absl::OkStatus();
  }));
  timing_.Phase("step: setup and launch");
  TNMT_RETURN_IF_ERROR(ctx_->Synchronize());
  timing_.Phase("step: wait for the device");
  index_.Advance(1);
  s->aligned.clear();
  for (size_t i = 0; i < s->alignment_layers.size(); ++i) {  // the first n rows of each layer's
    const int32_t* a = aligned_host_.as<int32_t>() + i * static_cast<size_t>(B);
    s->aligned.insert(s->aligned.end(), a, a + n);
  }
  if (host_scoring) {
    if (s->want_logprobs) s->logprobs.resize(logit_words);
    const float* logits = logits_host_.as<float>();
    for (int r = 0; r < n; ++r) ScoreRow(logits + static_cast<int64_t>(r) * V, r, V, c_.eos_id, c_.pad_id, s);
    return absl::OkStatus();
  }
  // The host reads the results only now, after the sync. Layout: lse [B], eos [B],
  // values [B, k], ids [B, k]; the first n rows of each are real.
  const float* got = download_.as<float>();
  const int64_t nk = static_cast<int64_t>(n) * k;
  const int64_t values_at = 2 * static_cast<int64_t>(B);
  const int64_t ids_at = values_at + static_cast<int64_t>(B) * k;
  std::memcpy(s->lse.data(), got, sizeof(float) * n);
  std::memcpy(s->eos_logit.data(), got + B, sizeof(float) * n);
  std::memcpy(s->top_logit.data(), got + values_at, sizeof(float) * nk);
  std::memcpy(s->top_id.data(), got + ids_at, sizeof(int32_t) * nk);
  return absl::OkStatus();
}

std::vector<uint64_t> CudaStepModel::GraphKey(int rows, int k, const int32_t* tables,
                                              const int32_t* from) const {
  const Activations& a = act_.get();
  std::vector<uint64_t> key = {static_cast<uint64_t>(rows), static_cast<uint64_t>(k),
                               static_cast<uint64_t>(index_.src_stride()), Word(tables), Word(from),
                               Word(step_in_.get()), Word(results_.get()),
                               Word(d_src_lengths_.get()), Word(d_src_slots_.get()), Word(a.x),
                               Word(a.y), Word(a.qkv), Word(a.attn), Word(a.cq), Word(a.hidden),
                               Word(a.logits), Word(a.half)};
  for (const kc::DeviceBuffer& b : self_.layers) key.push_back(Word(b.get()));
  for (const kc::DeviceBuffer& b : cross_.layers) key.push_back(Word(b.get()));
  return key;
}

absl::Status CudaStepModel::EnqueueStep(int B, int k, int32_t* tables, const int32_t* from) {
  const int32_t* d = step_in_.as<int32_t>();
  const int32_t *d_ids = d, *d_pos = d + B, *d_slot = d + 2 * B, *d_src = d + 3 * B,
                *d_valid = d + 4 * B, *d_map = d + 5 * B;
  TNMT_RETURN_IF_ERROR(kc::Timed(*ctx_, kernels::TimeCategory::kOther, [&] {
    return kernels::cuda::ReorderSlotTables(*ctx_, tables, from, max_steps_, d_map, d_pos, d_slot, B);
  }));
  TNMT_RETURN_IF_ERROR(Forward(B, d_ids, d_pos, d_slot, d_src, d_valid, tables));
  float* res = results_.as<float>();
  float* lse = res;
  float* eos = res + B;
  float* values = res + 2 * static_cast<int64_t>(B);
  int32_t* top_ids = reinterpret_cast<int32_t*>(values + static_cast<int64_t>(B) * k);
  const float* logits = act_.get().logits;
  return kc::Timed(*ctx_, kernels::TimeCategory::kTopK, [&] {
    TNMT_RETURN_IF_ERROR(kernels::cuda::LogSumExpAndPick(*ctx_, lse, eos, logits, B, c_.vocab_size, c_.eos_id));
    return kc::TopK(*ctx_, values, top_ids, logits, B, c_.vocab_size, k, c_.pad_id);
  });
}

absl::Status CudaStepModel::Forward(int n, const int32_t* d_ids, const int32_t* d_pos,
                                    const int32_t* d_slot, const int32_t* d_src,
                                    const int32_t* d_valid, const int32_t* tables) {
  const Activations& a = act_.get();
  const graph::StepAttention args = graph::PlanAttention(
      c_, plan_, max_steps_, tables, d_valid, d_src, d_src_lengths_.as<int32_t>(), d_src_slots_.as<int32_t>(),
      index_.src_stride(), /*fixed_bounds=*/true);
  // The graph's view of the device pools; alignments after the asked layers' cross-attention.
  struct Pools {
    CudaStepModel* m;
    float* self_pool(size_t layer) { return m->self_.layers[layer].as<float>(); }
    float* cross_pool(size_t layer) { return m->cross_.layers[layer].as<float>(); }
  } pools{this};
  const int d = c_.d_model;
  auto align = [this, d](size_t layer, const float* q, const kc::AttentionArgs& cross) {
    for (size_t i = 0; i < alignment_layers_.size(); ++i) {
      if (alignment_layers_[i] != static_cast<int>(layer)) continue;
      int32_t* out = aligned_.as<int32_t>() + i * static_cast<size_t>(cross.batch) * cross.q_len;
      TNMT_RETURN_IF_ERROR(kc::Timed(*ctx_, kernels::TimeCategory::kAttentionForward, [&] {
        return kc::AttentionArgmax(*ctx_, out, q, d, cross_.layers[layer].as<float>(), 0, 2 * d, cross);
      }));
    }
    return absl::OkStatus();
  };
  graph::StepCache cache(pools, d_slot, args, align);
  return graph::DecodeStep(cuda_engine::CudaLayerOps(*ctx_, *w_, a.half), a, d_ids, d_pos, n, cache, a.logits);
}

}  // namespace tnmt
