// The CPU engine's entry point, as engine/cuda/cuda_backend.h is the GPU's: a loaded model's
// weights (packed for inference, float32 or int8) as a DecodeBackend
// (engine/decode/step_model.h) whose StepModels (cpu_step_model.h) each own their scratch.
// Every decode (BeamDecoder, the server's schedulers, Translator, an ensemble's members) makes
// its StepModel through a backend, whichever the device.
#pragma once

#include <memory>
#include <string>

#include "engine/decode/step_model.h"
#include "engine/model/config.h"
#include "engine/model/shortlist.h"
#include "engine/model/weights.h"

namespace tnmt {

// c and w must outlive the backend and every StepModel made from it. `describe` is what
// Describe() returns (the placement, e.g. "cpu" or "cpu int8"). shortlist (null: none; its
// vocab_size the model's): the vocabulary shortlist its StepModels use when a step asks.
std::unique_ptr<DecodeBackend> MakeCpuBackend(const ModelConfig& c, const ModelWeights& w,
                                              std::string describe,
                                              std::shared_ptr<const Shortlist> shortlist = nullptr);

}  // namespace tnmt
