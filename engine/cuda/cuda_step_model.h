// StepModel on one GPU, with CpuStepModel's semantics (engine/cpu/cpu_step_model.h): the
// encoder, cross-attention K/V per source, the KV-cached decoder step, the per-row log-sum-exp,
// the eos logit and the top k (pad excluded) all run on the device; one Step() copies
// rows * (2 + 2k) numbers back to the host. A step that gathers logits (forced decoding: a
// score, a target prefix, a repetition penalty) or wants whole distributions (an ensemble)
// copies the rows' logits back instead and scores them on the host with the CPU engine's
// ScoreRow. Alignments run kernels::cuda::AttentionArgmax after the asked layers'
// cross-attention (such a step runs eagerly, outside the CUDA graphs).
//
// Memory layout, as engine/layers DecoderState: K/V live in slot pools (one slot = one
// position's K and V, [2 * d_model] float32, in every decoder layer); the self-attention pool
// holds decoded positions, the cross pool source positions. Pools grow by doubling and keep
// slot ids; slots belong to the source whose rows wrote them and are freed with it.
//   - Host bookkeeping (authoritative): engine/graph/kv_index.h, the same as the CPU's: free
//     lists, each source's slots and length, each row's source, position and `map` (which row
//     of the device slot tables holds its ancestry).
//   - Device slot tables [rows, max_steps] int32: row r's slot for each position. Reorder
//     only composes `map` on the host; the next Step gathers the tables into the spare buffer
//     by `map` (copying each row's valid prefix) and writes the new position's slot, in one
//     kernel, then swaps the buffers. So Reorder, ReleaseSource and rows() never touch the GPU.
//   - Source tables (each source's cross slots, [sources, src_stride], and lengths) are
//     uploaded by the first Step after AddSources changed them.
// Device work happens in AddSources (encoder + cross K/V; ends with a stream sync) and Step
// (one packed upload, the decoder, one packed download, one sync). Each call makes the
// model's device current on the calling thread, so a model may move between threads (one at
// a time).
//
// Precision: see device_layers.h (float32 activations, GEMMs in the weights' dtype with
// float32 accumulation and output). The KV cache, logits, log-sum-exp and top-k are float32.
//
// CUDA graphs (CudaStepOptions::cuda_graphs; CudaPlacement turns them on): the step's kernels (table
// reorder, decoder, log-sum-exp, top-k) are captured once per (row bucket, k, buffers) and
// replayed (graph_cache.h). Rows are padded to a bucket (a multiple of 16, of 64 above 256
// rows) so a decode's shrinking row count reuses graphs; padded rows decode pad_id at
// position 0 against a live source, write their K/V to reserved slots of their own, and are
// never returned. Every per-step input is uploaded to fixed device addresses before the
// launch, so a replay computes exactly what an eager run of the same bucket would.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cuda/device_layers.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/graph_cache.h"
#include "engine/cuda/pinned_buffer.h"
#include "engine/cuda/step_timing.h"
#include "engine/decode/step_model.h"
#include "engine/graph/kv_index.h"
#include "engine/graph/step_plan.h"
#include "kernels/cuda/context.h"

namespace tnmt {

struct CudaStepOptions {
  // Capture and replay the decode step as CUDA graphs (see above).
  bool cuda_graphs = false;
};

class CudaStepModel : public StepModel {
 public:
  static absl::StatusOr<std::unique_ptr<CudaStepModel>> Create(
      std::shared_ptr<const cuda_engine::DeviceWeights> weights,
      const CudaStepOptions& options = {});
  ~CudaStepModel() override;

  absl::StatusOr<std::vector<int32_t>> AddSources(const int32_t* ids, const int32_t* lengths,
                                                  int batch, int src_max) override;
  absl::Status ReleaseSource(int32_t source) override;
  absl::Status Reorder(const std::vector<int32_t>& parents,
                       const std::vector<int32_t>& new_sources) override;
  int rows() const override { return index_.rows(); }
  // k <= kernels::cuda::kMaxTopK (256) on the GPU.
  absl::Status Step(const int32_t* ids, int k, StepScores* scores) override;

  // Step without bringing the scores back, for the GPU beam search (cuda_beam_stepper.h):
  // queues the step on context()'s stream and says where its scores are on the device (valid
  // until the next step); nothing gathered, no alignments, no whole distributions.
  struct DeviceScores {
    int rows = 0, k = 0;
    const float* lse = nullptr;        // [rows]
    const float* eos_logit = nullptr;  // [rows]
    const float* top_logit = nullptr;  // [rows, k], StepScores' order
    const int32_t* top_id = nullptr;   // [rows, k]
  };
  absl::StatusOr<DeviceScores> StepOnDevice(const int32_t* ids, int k);
  kernels::cuda::Context& context() { return *ctx_; }

  // This model's device allocator (KV pools, slot tables, scratch, the cuBLASLt workspace;
  // not the shared weights).
  kernels::cuda::DeviceAllocator::Stats memory_stats() const;
  // K/V slots allocated (self + cross), as DecoderState::slots_in_use (the padded rows'
  // reserved slots not counted).
  int64_t slots_in_use() const;
  const cuda_engine::GraphCache::Stats& graph_stats() const { return graphs_.stats(); }

 private:
  // One pool's storage: per decoder layer, [capacity, width] float32 on the device (the
  // capacity and free slots are index_'s).
  struct Pool {
    int64_t width = 0;
    std::vector<kernels::cuda::DeviceBuffer> layers;
  };

  CudaStepModel(std::shared_ptr<const cuda_engine::DeviceWeights> weights,
                std::unique_ptr<kernels::cuda::Context> ctx, const CudaStepOptions& options);
  absl::StatusOr<std::vector<int32_t>> AddSourcesImpl(const int32_t* ids, const int32_t* lengths,
                                                      int batch, int src_max);
  // on_device: StepOnDevice's step (the scores stay on the device).
  absl::Status StepImpl(const int32_t* ids, int k, StepScores* scores, DeviceScores* on_device = nullptr);
  // Grows `pool`'s device storage for KvIndex::Reserve (slot ids kept, contents copied).
  graph::KvIndex::Grow GrowPool(graph::KvIndex::PoolId pool);
  // Makes `buffer` hold at least `bytes` (contents not kept when it grows).
  absl::Status EnsureBuffer(kernels::cuda::DeviceBuffer& buffer, size_t bytes, const char* what);
  // Queues one step for `rows` rows (inputs at step_in_, [6, rows]): the slot tables from
  // `from` into `tables`, the decoder, and the results (layout of results_) for k candidates.
  absl::Status EnqueueStep(int rows, int k, int32_t* tables, const int32_t* from);
  // Queues the decoder for `rows` rows, reading slot tables `tables`; writes the logits.
  absl::Status Forward(int rows, const int32_t* d_ids, const int32_t* d_pos, const int32_t* d_slot,
                       const int32_t* d_src, const int32_t* d_valid, const int32_t* tables);
  // The graph key of a step over `rows` rows: sizes and every buffer the step touches.
  std::vector<uint64_t> GraphKey(int rows, int k, const int32_t* tables, const int32_t* from) const;

  std::shared_ptr<const cuda_engine::DeviceWeights> w_;
  const ModelConfig& c_;
  // Declared before every device buffer: its allocator must outlive them.
  std::unique_ptr<kernels::cuda::Context> ctx_;
  int max_steps_ = 0;  // slot-table width: most positions a row may decode

  graph::KvIndex index_{"CudaStepModel"};  // sources, rows, slots (host, authoritative)
  Pool self_, cross_;
  bool src_dirty_ = false;  // index_'s source tables changed since the last upload
  kernels::cuda::DeviceBuffer d_src_lengths_, d_src_slots_;
  // Row r's ancestry is row index_.row_map()[r] of tables_[cur_] (-1: a new row).
  kernels::cuda::DeviceBuffer tables_[2];  // [rows, max_steps_] int32 each
  int cur_ = 0;

  kernels::cuda::DeviceBuffer step_in_;  // [6, rows] int32: ids, pos, slot, src, valid, map
  kernels::cuda::DeviceBuffer results_;  // lse [rows], eos [rows], values [rows, k], ids [rows, k]
  cuda_engine::ActivationBuffer act_;
  cuda_engine::PinnedBuffer upload_, download_;
  cuda_engine::PinnedBuffer logits_host_;  // [rows, vocab] for host scoring (see Step)
  // The current step's alignment layers, and their AttentionArgmax rows [layers, B].
  std::vector<int32_t> alignment_layers_;
  kernels::cuda::DeviceBuffer aligned_;
  cuda_engine::PinnedBuffer aligned_host_;

  const CudaStepOptions options_;
  std::vector<int32_t> pad_slots_;  // self slots of padded rows (graphs only), never freed
  graph::StepPlan plan_;             // the current step's rows and slots (buffers reused)
  StepScores device_step_;           // StepOnDevice's (empty) requests
  cuda_engine::GraphCache graphs_;
  // Last: its table is written (on destruction) while the Context is alive.
  cuda_engine::StepTiming timing_{*ctx_, "decode on cuda:" + std::to_string(ctx_->device())};
};

}  // namespace tnmt
