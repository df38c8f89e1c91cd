// CpuStepModel; see cpu_step_model.h.
#include "engine/cpu/cpu_step_model.h"

#include <algorithm>
#include <utility>

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
                                                                   const ModelWeights& w) {
  TNMT_ASSIGN_OR_RETURN(DecoderState state, DecoderState::Create(c, w, MaxPositions(c)));
  return std::unique_ptr<CpuStepModel>(new CpuStepModel(c, w, std::move(state)));
}

absl::StatusOr<std::vector<int32_t>> CpuStepModel::AddSources(const int32_t* ids,
                                                              const int32_t* lengths, int batch,
                                                              int src_max) {
  // Only the sentences' own positions: no padding row is encoded or projected to K/V.
  TNMT_ASSIGN_OR_RETURN(Tensor enc, EncodeRows(c_, w_, ids, lengths, batch, src_max, &ws_));
  return state_.AddSourceRows(enc, lengths, batch);
}

absl::Status CpuStepModel::Step(const int32_t* ids, int k, StepScores* s) {
  const int rows = state_.rows();
  const int V = c_.vocab_size;
  TNMT_RETURN_IF_ERROR(s->Reset(rows, k, V));
  TNMT_RETURN_IF_ERROR(s->CheckGather(rows, V));
  TNMT_RETURN_IF_ERROR(s->CheckAlignmentLayers(static_cast<int>(w_.decoder.size())));
  state_.set_alignment_layers(s->alignment_layers);
  const float* hidden = nullptr;
  TNMT_RETURN_IF_ERROR(DecoderForward(c_, w_, &state_, ids, 1, /*logits=*/nullptr, &ws_, &hidden));
  // The output projection and the scoring run a part of the rows at a time, so that each
  // part's logits ([part, vocab]: 32 KiB a row at 8000 tokens) are still in cache when the
  // log-softmax normalizer and the top k read them; the whole step's would not be. The
  // packed GEMM computes every element the same way whatever the number of rows, so the
  // scores are those of one projection of all the rows.
  const int part = LogitsRowsPerPart(rows);
  logits_.resize(static_cast<size_t>(part) * V);
  if (s->want_logprobs) s->logprobs.resize(static_cast<size_t>(rows) * V);
  const CpuLayerOps ops(c_, w_);
  for (int r0 = 0; r0 < rows; r0 += part) {
    const int n = std::min(part, rows - r0);
    TNMT_RETURN_IF_ERROR(ops.Logits(logits_.data(), hidden + static_cast<int64_t>(r0) * c_.d_model, n));
    // Per row, on the compute threads: the log-softmax normalizer (unless the caller does not
    // want it) and the k best tokens (the row is still in cache for the second pass).
    kernels::cpu::ParallelFor(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) ScoreRow(logits_.data() + i * V, r0 + i, V, c_.eos_id, c_.pad_id, s);
    });
  }
  s->aligned.clear();
  for (const std::vector<int32_t>& a : state_.alignments()) s->aligned.insert(s->aligned.end(), a.begin(), a.end());
  return absl::OkStatus();
}

}  // namespace tnmt
