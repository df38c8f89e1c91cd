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
  const bool forced = !s->forced_id.empty();
  if (forced) {
    if (static_cast<int>(s->forced_id.size()) != rows) {
      return absl::InvalidArgumentError(absl::StrCat("forced_id has ", s->forced_id.size(), " ids for ", rows, " rows"));
    }
    for (int32_t id : s->forced_id) {
      if (id < 0 || id >= V) return absl::InvalidArgumentError(absl::StrCat("forced token id ", id, " outside the vocabulary"));
    }
    s->forced_logit.resize(rows);
  }
  logits_.resize(static_cast<size_t>(rows) * V);
  TNMT_RETURN_IF_ERROR(DecoderForward(c_, w_, &state_, ids, 1, logits_.data(), ws_));
  // Per row, on the compute threads: the log-softmax normalizer and the k best tokens (the row
  // is still in cache for the second pass).
  kernels::cpu::ParallelFor(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = logits_.data() + r * V;
      kernels::cpu::LogSumExp(s->lse.data() + r, row, 1, V);
      s->eos_logit[r] = row[c_.eos_id];
      if (forced) s->forced_logit[r] = row[s->forced_id[r]];
      kernels::cpu::RowTopK(row, V, k, c_.pad_id, s->top_logit.data() + r * k, s->top_id.data() + r * k);
    }
  });
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StepModel>> MakeStepModel(const ModelConfig& c, const ModelWeights& w,
                                                         const DecodeBackend* backend, Workspace* ws) {
  if (backend != nullptr) return backend->NewStepModel();
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<CpuStepModel> model, CpuStepModel::Create(c, w, ws));
  return std::unique_ptr<StepModel>(std::move(model));
}

}  // namespace tnmt
