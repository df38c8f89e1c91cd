// CpuStepModel; see cpu_step_model.h.
#include "engine/decode/cpu_step_model.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/layers/encoder.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/topk.h"

namespace tnmt {


absl::StatusOr<std::unique_ptr<CpuStepModel>> CpuStepModel::Create(const ModelConfig& c,
                                                                   const ModelWeights& w,
                                                                   Workspace* ws) {
  TNMT_ASSIGN_OR_RETURN(DecoderState state, DecoderState::Create(c, w, MaxPositions(c)));
  return std::unique_ptr<CpuStepModel>(new CpuStepModel(c, w, ws, std::move(state)));
}

absl::StatusOr<std::vector<int32_t>> CpuStepModel::AddSources(const int32_t* ids,
                                                              const int32_t* lengths, int batch,
                                                              int src_max) {
  TNMT_ASSIGN_OR_RETURN(Tensor enc, Encode(c_, w_, ids, lengths, batch, src_max, ws_));
  return state_.AddSources(enc, lengths);
}

absl::Status CpuStepModel::Step(const int32_t* ids, int k, StepScores* s) {
  const int rows = state_.rows();
  const int V = c_.vocab_size;
  TNMT_RETURN_IF_ERROR(s->Reset(rows, k, V));
  TNMT_RETURN_IF_ERROR(s->CheckGather(rows, V));
  const bool gather = !s->gather_offsets.empty();
  for (int32_t layer : s->alignment_layers) {
    if (layer < 0 || layer >= static_cast<int>(w_.decoder.size())) {
      return absl::InvalidArgumentError(absl::StrCat("alignment layer ", layer, " outside [0, ",
                                                     w_.decoder.size(), ")"));
    }
  }
  state_.set_alignment_layers(s->alignment_layers);
  logits_.resize(static_cast<size_t>(rows) * V);
  TNMT_RETURN_IF_ERROR(DecoderForward(c_, w_, &state_, ids, 1, logits_.data(), ws_));
  // Per row, on the compute threads: the log-softmax normalizer and the k best tokens (the row
  // is still in cache for the second pass).
  kernels::cpu::ParallelFor(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = logits_.data() + r * V;
      kernels::cpu::LogSumExp(s->lse.data() + r, row, 1, V);
      s->eos_logit[r] = row[c_.eos_id];
      if (gather) {
        for (int32_t i = s->gather_offsets[r]; i < s->gather_offsets[r + 1]; ++i) s->gather_logit[i] = row[s->gather_ids[i]];
      }
      kernels::cpu::RowTopK(row, V, k, c_.pad_id, s->top_logit.data() + r * k, s->top_id.data() + r * k);
    }
  });
  s->aligned.clear();
  for (const std::vector<int32_t>& a : state_.alignments()) s->aligned.insert(s->aligned.end(), a.begin(), a.end());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StepModel>> MakeStepModel(const ModelConfig& c, const ModelWeights& w,
                                                         const DecodeBackend* backend, Workspace* ws) {
  if (backend != nullptr) return backend->NewStepModel();
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<CpuStepModel> model, CpuStepModel::Create(c, w, ws));
  return std::unique_ptr<StepModel>(std::move(model));
}

}  // namespace tnmt
