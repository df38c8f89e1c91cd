// StepModel on the CPU: the encoder and the KV-cached decoder of engine/layers, float32
// activations (GEMMs over the weights as PackForInference packed them: float32 or int8), with
// scratch of its own. Made by CpuBackend (cpu_backend.h); use each from one thread at a time.
// With a vocabulary shortlist, a step asked for it (StepScores::use_shortlist) projects only the
// candidate set of the sources held (shortlist_projection.h): gathered again when a source
// needs a candidate the set lacks, or when sources have left and it is over a quarter larger
// than the held sources need.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/decode/step_model.h"
#include "engine/layers/decoder.h"
#include "engine/layers/workspace.h"
#include "engine/cpu/shortlist_projection.h"
#include "engine/model/shortlist.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace tnmt {

class CpuStepModel : public StepModel {
 public:
  // c, w and shortlist (null: none) must outlive the model.
  static absl::StatusOr<std::unique_ptr<CpuStepModel>> Create(const ModelConfig& c,
                                                              const ModelWeights& w,
                                                              const Shortlist* shortlist = nullptr);

  absl::StatusOr<std::vector<int32_t>> AddSources(const int32_t* ids, const int32_t* lengths,
                                                  int batch, int src_max) override;
  absl::Status ReleaseSource(int32_t source) override;
  absl::Status Reorder(const std::vector<int32_t>& parents,
                       const std::vector<int32_t>& new_sources) override {
    return state_.Reorder(parents, new_sources);
  }
  int rows() const override { return state_.rows(); }
  absl::Status Step(const int32_t* ids, int k, StepScores* scores) override;
  bool has_shortlist() const override { return shortlist_ != nullptr; }

 private:
  CpuStepModel(const ModelConfig& c, const ModelWeights& w, const Shortlist* shortlist, DecoderState state)
      : c_(c), w_(w), state_(std::move(state)), shortlist_(shortlist), projection_(c, w) {}
  // The shortlist's candidate set of the sources held, projected (when stale).
  void UpdateCandidates();
  const ModelConfig& c_;
  const ModelWeights& w_;
  Workspace ws_;  // the encoder's and the decoder's scratch
  DecoderState state_;
  std::vector<float> logits_;  // [rows of one part, vocab or candidates] (see Step)
  const Shortlist* shortlist_;
  // With a shortlist: each held source's ids (indexed by source id; empty when released).
  std::vector<std::vector<int32_t>> source_ids_;
  bool candidates_stale_ = true;
  ShortlistProjection projection_;
  std::vector<uint8_t> mark_;  // Shortlist::Candidates' scratch
};

}  // namespace tnmt
