// StepModel on the CPU: the encoder and the KV-cached decoder of engine/layers, float32,
// scratch from a caller's Workspace (which must outlive it and serve one thread).
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/decode/step_model.h"
#include "engine/layers/decoder.h"
#include "engine/layers/workspace.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace tnmt {

class CpuStepModel : public StepModel {
 public:
  static absl::StatusOr<std::unique_ptr<CpuStepModel>> Create(const ModelConfig& c,
                                                              const ModelWeights& w,
                                                              Workspace* ws);

  absl::StatusOr<std::vector<int32_t>> AddSources(const int32_t* ids, const int32_t* lengths,
                                                  int batch, int src_max) override;
  absl::Status ReleaseSource(int32_t source) override { return state_.ReleaseSource(source); }
  absl::Status Reorder(const std::vector<int32_t>& parents,
                       const std::vector<int32_t>& new_sources) override {
    return state_.Reorder(parents, new_sources);
  }
  int rows() const override { return state_.rows(); }
  absl::Status Step(const int32_t* ids, int k, StepScores* scores) override;

 private:
  CpuStepModel(const ModelConfig& c, const ModelWeights& w, Workspace* ws, DecoderState state)
      : c_(c), w_(w), ws_(ws), state_(std::move(state)) {}
  const ModelConfig& c_;
  const ModelWeights& w_;
  Workspace* ws_;
  DecoderState state_;
  std::vector<float> logits_;  // [rows of one part, vocab] (see Step)
};

// Fills row r of `s` from that row's logits on the host: lse, eos_logit, the gathered logits,
// the s->k best tokens and, with want_logprobs, every log-probability. The scoring of
// CpuStepModel, and of an ensemble's combined row; `s` as Reset and CheckGather left it.
void ScoreRow(const float* logits, int64_t r, int vocab, int eos_id, int pad_id, StepScores* s);

// A StepModel on `backend`'s device when it is not null (a new one of it), else on the CPU over
// `w` with scratch `ws`.
absl::StatusOr<std::unique_ptr<StepModel>> MakeStepModel(const ModelConfig& c, const ModelWeights& w,
                                                         const DecodeBackend* backend, Workspace* ws);

}  // namespace tnmt
