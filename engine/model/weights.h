// ModelWeights: every parameter of the encoder-decoder, in float32, in the layout the engine
// computes with. Built from the tensors of model.safetensors (docs/model-format.md), with
// q/k/v projections fused at load: self-attention uses one [3*d, d] matrix, cross-attention
// one [2*d, d] matrix for k/v applied once to the encoder output.
// Invariant after Build(): every tensor has the shape the config implies.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "engine/model/config.h"
#include "engine/model/param_tree.h"
#include "engine/model/safetensors.h"
#include "kernels/cpu/gemm.h"

namespace tnmt {

struct Linear {
  Tensor weight;  // [out, in]
  Tensor bias;    // [out]; empty when the layer has none
  // `weight` packed for kernels::cpu::GemmPacked by ModelWeights::PackForInference; empty
  // otherwise. A snapshot: it does not follow later changes to `weight`.
  kernels::cpu::PackedMatrix packed;
};

struct LayerNormWeights {
  Tensor gamma;  // [d_model]
  Tensor beta;   // [d_model]
};

using EncoderLayerWeights = EncoderLayerParams<Linear, LayerNormWeights>;
using DecoderLayerWeights = DecoderLayerParams<Linear, LayerNormWeights>;

// The model tree (param_tree.h) over host tensors: tied tables share storage, sinusoidal
// positions are the precomputed table, final layer norms are empty unless pre-norm, the logits
// bias empty unless config.final_logits_bias.
struct ModelWeights : ModelParams<Tensor, Tensor, Linear, LayerNormWeights> {
  // output_projection packed for GemmPacked (PackForInference); empty otherwise.
  kernels::cpu::PackedMatrix output_projection_packed;

  // Rows of the sinusoidal table precomputed at load (longest supported sequence).
  static constexpr int kSinusoidRows = kSinusoidTableRows;

  // Takes tensors by fairseq name; `source` (the file) is named in every error. Missing,
  // misshapen and unexpected tensors are errors.
  static absl::StatusOr<ModelWeights> Build(const ModelConfig& config, TensorMap tensors,
                                            const std::string& source);
  // Every tensor the config implies, parameters zero (sinusoid tables computed, ties made).
  static absl::StatusOr<ModelWeights> Zeros(const ModelConfig& config);

  // Packs every linear (encoder, decoder, cross-attention K/V) and the output projection for
  // GemmPacked (every CPU has a packed kernel), so no inference GEMM re-packs weights
  // or goes through OpenBLAS: a sentence's scores then do not depend on its batch or on the
  // thread count. For weights that no longer change: model loading calls it, the trainer
  // (which updates weights in place) must not. The row-major tensors are kept: they stay the
  // model's weights for ToTensors and for sharing with a trainer. The packed copies add 4
  // bytes per packed parameter (Transformer-base, 37k vocabulary: ~63M, ~240 MiB).
  // int8: the same matrices quantized to int8 (PackedMatrix::PackInt8, one scale per output
  // channel; 1 byte per parameter), on every CPU; the embeddings stay float32.
  void PackForInference(bool int8 = false);
  // Bytes held by the packed copies.
  int64_t PackedBytes() const;
  // Bytes of every parameter tensor (shared storage once) plus the packed copies: what the
  // model holds in memory for inference.
  int64_t Bytes(const ModelConfig& config) const;

  // Inverse of Build: fairseq names to unfused tensors (for writing checkpoints).
  std::map<std::string, Tensor> ToTensors(const ModelConfig& config) const;
};

// Longest sequence (source or target, in tokens) the positions support.
int MaxPositions(const ModelConfig& config);

}  // namespace tnmt
