// LoadedModel: everything in a model directory, loaded and cross-checked, immutable after
// load so any number of threads may translate with it at once.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/decode/beam_search.h"
#include "engine/decode/step_model.h"
#include "engine/model/config.h"
#include "engine/model/shortlist.h"
#include "engine/model/weights.h"
#include "engine/runtime/placement.h"
#include "engine/tokenizer/tokenizer.h"

namespace tnmt {

struct LoadedModel {
  std::string directory;
  ModelConfig config;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;
  int64_t parameter_count = 0;  // scalars stored in model.safetensors (shared tensors once)
  Placement placement;
  // The engine on the placement's device, never null: on the CPU over `weights` (packed for
  // inference), on a GPU over its own copy of them. Every decode makes its StepModel here.
  std::shared_ptr<const DecodeBackend> backend;
  // The vocabulary shortlist loaded with the model (null: none); the CPU backend's StepModels
  // use it for decodes with DecodeOptions::use_shortlist.
  std::shared_ptr<const Shortlist> shortlist;
};

// A decoder for `model` on its device (a new StepModel of model.backend).
absl::StatusOr<BeamDecoder> NewBeamDecoder(const LoadedModel& model);

// Whether `other` can decode in an ensemble with `first` (engine/decode/ensemble_step_model.h):
// the same vocabulary (size, every piece, the special ids and the decoder's start token), on
// any devices. The error names both directories and the first difference.
absl::Status CheckEnsembleMembers(const LoadedModel& first, const LoadedModel& other);

// Loads each of `dirs` with `placement` as a further ensemble member of `first`, checked with
// CheckEnsembleMembers.
absl::StatusOr<std::vector<std::shared_ptr<const LoadedModel>>> LoadEnsembleMembers(
    const LoadedModel& first, const std::vector<std::string>& dirs, const Placement& placement);

// Loads `dir`/config.json, `dir`/model.safetensors and the vocabulary (`dir`/spm.model, or the
// separate source/target SentencePiece models and id map config.json names). Every failure names
// the file and the problem (missing file, bad JSON, truncated weights, wrong shape, missing
// tensor, vocabulary size or special ids disagreeing between config.json and spm.model).
// With a CUDA placement the weights are also copied to that device. shortlist: a vocabulary
// shortlist file to load with the model ("": none; engine/model/shortlist.h), refused with a
// CUDA placement and when its vocabulary size is not the model's.
absl::StatusOr<std::shared_ptr<const LoadedModel>> LoadModelDirectory(
    const std::string& dir, const Placement& placement = {}, const std::string& shortlist = "");

}  // namespace tnmt
