// StepModel on the CPU: the encoder and the KV-cached decoder of engine/layers, float32
// activations (GEMMs over the weights as PackForInference packed them: float32 or int8), with
// scratch of its own. Made by CpuBackend (cpu_backend.h); use each from one thread at a time.
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
  // c and w must outlive the model.
  static absl::StatusOr<std::unique_ptr<CpuStepModel>> Create(const ModelConfig& c,
                                                              const ModelWeights& w);

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
  CpuStepModel(const ModelConfig& c, const ModelWeights& w, DecoderState state)
      : c_(c), w_(w), state_(std::move(state)) {}
  const ModelConfig& c_;
  const ModelWeights& w_;
  Workspace ws_;  // the encoder's and the decoder's scratch
  DecoderState state_;
  std::vector<float> logits_;  // [rows of one part, vocab] (see Step)
};

}  // namespace tnmt
