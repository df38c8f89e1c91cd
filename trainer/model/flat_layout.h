// FlatLayout: the trainable tensors of a model packed into one flat float array (device
// engines keep parameters, gradients, Adam moments and half-precision weight copies as such
// arrays, so that one kernel updates or converts all of them), and the buckets in which data
// parallelism all-reduces the gradients while the backward still runs.
//
// Invariants: tensors are ordered by the backward stage that finishes their gradients (see
// BackwardStages: the output projection first, the decoder's top layer next, ..., the encoder's
// embeddings last; a shared tensor counts at its last use, which is its source's in the model
// tree), in the model tree's order within a stage (param_tree.h), each starts at a multiple of kAlign
// elements and the padding between them is zero; buckets are contiguous, cover [0, size()),
// end at stage boundaries, and every tensor in a bucket is final once the backward has finished
// the bucket's last_stage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/param_tree.h"
#include "engine/model/weights.h"
#include "trainer/model/train_graph.h"  // BackwardStages

namespace tnmt::train {

// Element offsets into the flat array (-1: no such tensor).
struct FlatLinear {
  int64_t weight = -1, bias = -1;
  int out = 0, in = 0;  // weight: [out, in]
};
struct FlatLayerNorm {
  int64_t gamma = -1, beta = -1;
};
using FlatEncoderLayer = EncoderLayerParams<FlatLinear, FlatLayerNorm>;
using FlatDecoderLayer = DecoderLayerParams<FlatLinear, FlatLayerNorm>;
// The model tree over offsets: tied tables share their source's offset; tensors that are not
// trained (sinusoid tables, the logits bias) and absent ones stay -1.
struct FlatModel : ModelParams<int64_t, int64_t, FlatLinear, FlatLayerNorm> {
  FlatModel() {
    encoder_embed = decoder_embed = output_projection = -1;
    final_logits_bias = encoder_positions = decoder_positions = -1;
  }
};

struct FlatTensor {
  std::string name;     // as TrainableParams names it
  int param_index = 0;  // position in TrainableParams(c, w)
  int64_t offset = 0;
  int64_t numel = 0;
  int stage = 0;  // the backward stage after which its gradient is final
};

struct GradBucket {
  int64_t offset = 0, count = 0;  // elements [offset, offset + count) of the flat array
  int last_stage = 0;             // ready once the backward has finished this stage
};

class FlatLayout {
 public:
  static constexpr int64_t kAlign = 64;  // elements: 256 bytes of float32, 128 of half

  // Layout of `w`'s trainable tensors (any ModelWeights of config `c` gives the same one).
  // Buckets close at the first stage boundary at or past `bucket_bytes` of float32 gradients.
  static absl::StatusOr<FlatLayout> Create(const ModelConfig& c, const ModelWeights& w, int64_t bucket_bytes);

  int64_t size() const { return size_; }  // elements, padding included
  const FlatModel& model() const { return model_; }
  const BackwardStages& stages() const { return stages_; }
  const std::vector<FlatTensor>& tensors() const { return tensors_; }  // by offset
  const std::vector<GradBucket>& buckets() const { return buckets_; }  // by offset

  // flat: [size()] = the tensors of `w` (a ModelWeights of the same config), padding zero.
  absl::Status Gather(const ModelConfig& c, const ModelWeights& w, float* flat) const;
  // The inverse: every trainable tensor of *w from flat.
  absl::Status Scatter(const ModelConfig& c, const float* flat, ModelWeights* w) const;
  // `like` (a ModelWeights of the same config) with every trainable tensor replaced by a view
  // of its place in `flat` ([size()] float32 elements; tied tables share their source's view):
  // host engines keep parameters, gradients and moments in flat arrays and compute on these
  // views. The other tensors (sinusoid tables, a logits bias) stay `like`'s.
  absl::StatusOr<ModelWeights> Views(const ModelConfig& c, const ModelWeights& like, const Tensor& flat) const;

 private:
  int64_t size_ = 0;
  FlatModel model_;
  BackwardStages stages_;
  std::vector<FlatTensor> tensors_;
  std::vector<GradBucket> buckets_;
};

}  // namespace tnmt::train
