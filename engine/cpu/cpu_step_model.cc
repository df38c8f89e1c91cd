// CpuStepModel; see cpu_step_model.h.
#include "engine/cpu/cpu_step_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/layers/cpu_layer_ops.h"
#include "engine/layers/encoder.h"
#include "kernels/cpu/parallel.h"

namespace tnmt {

namespace {

// Rows per part of a step's output projection (see Step): 64 rows of 8000 logits are 2 MiB.
// Measured on the demo model (Zen 4, 1 thread, test_2016_flickr): 32 to 128 rows 3-5% faster
// than all the rows at once in float32 and int8, 256 no better than all; on 2 threads no
// difference beyond the machine's noise.
int LogitsRowsPerPart(int rows) { return std::min(rows, 64); }

}  // namespace

absl::StatusOr<std::unique_ptr<CpuStepModel>> CpuStepModel::Create(const ModelConfig& c,
                                                                   const ModelWeights& w,
                                                                   const Shortlist* shortlist) {
  TNMT_ASSIGN_OR_RETURN(DecoderState state, DecoderState::Create(c, w, MaxPositions(c)));
  return std::unique_ptr<CpuStepModel>(new CpuStepModel(c, w, shortlist, std::move(state)));
}

absl::StatusOr<std::vector<int32_t>> CpuStepModel::AddSources(const int32_t* ids,
                                                              const int32_t* lengths, int batch,
                                                              int src_max) {
  // Only the sentences' own positions: no padding row is encoded or projected to K/V.
  TNMT_ASSIGN_OR_RETURN(Tensor enc, EncodeRows(c_, w_, ids, lengths, batch, src_max, &ws_));
  TNMT_ASSIGN_OR_RETURN(std::vector<int32_t> sources, state_.AddSourceRows(enc, lengths, batch));
  if (shortlist_ != nullptr) {
    for (int b = 0; b < batch; ++b) {
      const size_t id = static_cast<size_t>(sources[b]);
      if (source_ids_.size() <= id) source_ids_.resize(id + 1);
      const int32_t* row = ids + static_cast<int64_t>(b) * src_max;
      source_ids_[id].assign(row, row + lengths[b]);
    }
    candidates_stale_ = true;
  }
  return sources;
}

absl::Status CpuStepModel::ReleaseSource(int32_t source) {
  TNMT_RETURN_IF_ERROR(state_.ReleaseSource(source));
  if (shortlist_ != nullptr && static_cast<size_t>(source) < source_ids_.size()) {
    source_ids_[source].clear();
    candidates_stale_ = true;
  }
  return absl::OkStatus();
}

void CpuStepModel::UpdateCandidates() {
  if (!candidates_stale_) return;
  std::vector<int32_t> held;
  for (const std::vector<int32_t>& ids : source_ids_) held.insert(held.end(), ids.begin(), ids.end());
  std::vector<int32_t> needed = shortlist_->Candidates(held, c_.eos_id, c_.unk_id, c_.pad_id, &mark_);
  candidates_stale_ = false;
  // Gathering and packing the rows costs about as much as a few steps' projections: a set that
  // holds every candidate needed and is at most a quarter larger stays (sources leaving a batch
  // do not re-gather it at once).
  if (projection_.Covers(needed) && static_cast<size_t>(projection_.candidate_tokens()) <= needed.size() + needed.size() / 4) return;
  projection_.SetCandidates(std::move(needed));
}

absl::Status CpuStepModel::Step(const int32_t* ids, int k, StepScores* s) {
  const int rows = state_.rows();
  const int V = c_.vocab_size;
  TNMT_RETURN_IF_ERROR(s->Reset(rows, k, V));
  TNMT_RETURN_IF_ERROR(s->CheckGather(rows, V));
  TNMT_RETURN_IF_ERROR(s->CheckAlignmentLayers(static_cast<int>(w_.decoder.size())));
  state_.set_alignment_layers(s->alignment_layers);
  const bool shortlisted = s->use_shortlist;
  if (shortlisted) {
    if (shortlist_ == nullptr) {
      return absl::InvalidArgumentError("use_shortlist: the model was loaded without a vocabulary shortlist");
    }
    UpdateCandidates();
    if (k > projection_.candidate_tokens()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the shortlist gives ", projection_.candidate_tokens(), " candidate tokens for this batch, fewer than the ", k,
          " the search needs per step (build the table with more --frequent pieces)"));
    }
  }
  const float* hidden = nullptr;
  TNMT_RETURN_IF_ERROR(DecoderForward(c_, w_, &state_, ids, 1, /*logits=*/nullptr, &ws_, &hidden));
  // The output projection and the scoring run a part of the rows at a time, so that each
  // part's logits ([part, vocab]: 32 KiB a row at 8000 tokens) are still in cache when the
  // log-softmax normalizer and the top k read them; the whole step's would not be. The
  // packed GEMM computes every element the same way whatever the number of rows, so the
  // scores are those of one projection of all the rows.
  // With the shortlist, the same over the candidates' compact logits ([part, C]).
  const int part = LogitsRowsPerPart(rows);
  const int width = shortlisted ? projection_.size() : V;
  const int d = c_.d_model;
  logits_.resize(static_cast<size_t>(part) * width);
  if (s->want_logprobs) s->logprobs.resize(static_cast<size_t>(rows) * V);
  const CpuLayerOps ops(c_, w_);
  for (int r0 = 0; r0 < rows; r0 += part) {
    const int n = std::min(part, rows - r0);
    const float* x = hidden + static_cast<int64_t>(r0) * d;
    if (shortlisted) {
      projection_.Logits(logits_.data(), x, n);
    } else {
      TNMT_RETURN_IF_ERROR(ops.Logits(logits_.data(), x, n));
    }
    // Per row, on the compute threads: the log-softmax normalizer (unless the caller does not
    // want it) and the k best tokens (the row is still in cache for the second pass).
    kernels::cpu::ParallelFor(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        if (shortlisted) {
          projection_.ScoreRow(logits_.data() + i * width, x + i * d, r0 + i, s);
        } else {
          ScoreRow(logits_.data() + i * V, r0 + i, V, c_.eos_id, c_.pad_id, s);
        }
      }
    });
  }
  s->aligned.clear();
  for (const std::vector<int32_t>& a : state_.alignments()) s->aligned.insert(s->aligned.end(), a.begin(), a.end());
  return absl::OkStatus();
}

}  // namespace tnmt
