// Shared helpers of the training-engine tests: tiny model variants that together cover every
// wiring option (post/pre-norm, relu/gelu, sinusoidal/learned positions, every embedding
// sharing), random padded batches, copies of ModelWeights, and per-tensor error norms.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "trainer/model/parameters.h"
#include "trainer/model/transformer_train.h"

namespace tnmt::train::testing {

struct Variant {
  std::string name;
  ModelConfig config;
};

// d_model 32, 4 heads, d_ff 48, 2+2 layers, vocab 37 (odd sizes catch stride mistakes).
inline std::vector<Variant> TinyVariants() {
  ModelConfig base;
  base.vocab_size = 37;
  base.d_model = 32;
  base.num_heads = 4;
  base.d_ff = 48;
  base.encoder_layers = 2;
  base.decoder_layers = 2;
  base.max_positions = 64;
  std::vector<Variant> v;
  v.push_back({"postnorm_relu_shared", base});
  ModelConfig pre = base;
  pre.normalize_before = true;
  pre.activation = kernels::Activation::kGelu;
  pre.position_encoding = PositionEncoding::kLearned;
  pre.share_embeddings = false;
  pre.share_decoder_input_output_embed = false;
  pre.encoder_layers = 3;
  pre.decoder_layers = 1;
  v.push_back({"prenorm_gelu_learned_unshared", pre});
  ModelConfig mixed = base;
  mixed.share_embeddings = false;  // decoder input = output projection, encoder separate
  mixed.scale_embedding = false;
  mixed.label_smoothing = 0.0f;
  v.push_back({"postnorm_decoder_tied", mixed});
  return v;
}

// A padded batch: sources of random lengths in [1, src_len] (ids then eos), targets likewise
// (bos + ids / ids + eos); at least one row uses the full lengths.
inline TrainBatch RandomBatch(const ModelConfig& c, uint64_t seed, int batch, int src_len, int tgt_len) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> tok(4, c.vocab_size - 1);
  TrainBatch b;
  b.batch = batch;
  b.src_len = src_len;
  b.tgt_len = tgt_len;
  b.src.assign(static_cast<size_t>(batch) * src_len, c.pad_id);
  b.tgt_in.assign(static_cast<size_t>(batch) * tgt_len, c.pad_id);
  b.tgt_out.assign(static_cast<size_t>(batch) * tgt_len, c.pad_id);
  for (int i = 0; i < batch; ++i) {
    const int sl = i == 0 ? src_len : std::uniform_int_distribution<int>(1, src_len)(rng);
    const int tl = i == batch - 1 ? tgt_len : std::uniform_int_distribution<int>(1, tgt_len)(rng);
    for (int j = 0; j + 1 < sl; ++j) b.src[i * src_len + j] = tok(rng);
    b.src[i * src_len + sl - 1] = c.eos_id;
    b.src_lengths.push_back(sl);
    b.tgt_in[i * tgt_len] = c.bos_id;
    for (int j = 0; j + 1 < tl; ++j) {
      const int t = tok(rng);
      b.tgt_out[i * tgt_len + j] = t;
      b.tgt_in[i * tgt_len + j + 1] = t;
    }
    b.tgt_out[i * tgt_len + tl - 1] = c.eos_id;
  }
  return b;
}

// A deep copy (own storage) of `w`.
inline absl::StatusOr<ModelWeights> Clone(const ModelConfig& c, const ModelWeights& w) {
  absl::StatusOr<ModelWeights> out = ZerosLike(c, w);
  if (!out.ok()) return out;
  auto src = TrainableParams(c, const_cast<ModelWeights*>(&w));
  auto dst = TrainableParams(c, &*out);
  for (size_t i = 0; i < src.size() && i < dst.size(); ++i) {
    std::copy(src[i].tensor->f32(), src[i].tensor->f32() + src[i].tensor->numel(), dst[i].tensor->f32());
  }
  return out;
}

// ||got - want|| / ||want|| over one tensor (2-norms in double; 0/0 = 0, x/0 = |x|).
inline double RelativeError(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = static_cast<double>(got.f32()[i]) - want.f32()[i];
    num += d * d;
    den += static_cast<double>(want.f32()[i]) * want.f32()[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Element-wise equality of every trainable tensor (bit patterns of floats).
inline bool BitIdentical(const ModelConfig& c, const ModelWeights& a, const ModelWeights& b) {
  auto x = TrainableParams(c, const_cast<ModelWeights*>(&a));
  auto y = TrainableParams(c, const_cast<ModelWeights*>(&b));
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i].tensor->numel() != y[i].tensor->numel()) return false;
    if (!std::equal(x[i].tensor->data<uint32_t>(), x[i].tensor->data<uint32_t>() + x[i].tensor->numel(),
                    y[i].tensor->data<uint32_t>())) {
      return false;
    }
  }
  return true;
}

}  // namespace tnmt::train::testing
