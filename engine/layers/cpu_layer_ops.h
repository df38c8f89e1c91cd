// The CPU's layer operations for the Transformer graph (engine/graph/transformer.h) over
// kernels/cpu: host memory, ModelWeights (packed at load for the packed GEMM where the CPU has
// one). Every operation runs synchronously and returns OkStatus.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/graph/layer_ops.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "kernels/cpu/attention.h"

namespace tnmt {

class CpuLayerOps {
 public:
  using Weights = ModelWeights;
  using LinearParams = ::tnmt::Linear;
  using NormParams = LayerNormWeights;

  CpuLayerOps(const ModelConfig& c, const ModelWeights& w) : c_(c), w_(w) {}

  const ModelConfig& config() const { return c_; }
  const ModelWeights& weights() const { return w_; }

  absl::Status Linear(float* y, const float* x, int64_t rows, const LinearParams& l,
                      bool activate) const;
  absl::Status LayerNorm(float* y, const float* x, const float* residual, int64_t rows,
                         const NormParams& ln) const;
  absl::Status Add(float* x, const float* f, int64_t n) const;
  absl::Status Embed(float* x, const int32_t* ids, const int32_t* positions, int64_t rows,
                     bool decoder) const;
  absl::Status Attention(float* out, int64_t ld_out, const float* q, int64_t ld_q, const float* k,
                         const float* v, int64_t ld_kv, int64_t kv_group_stride,
                         const kernels::cpu::AttentionArgs& args) const;
  absl::Status ScatterRows(float* dst, int64_t dst_stride, const int32_t* dst_rows,
                           const float* src, int64_t src_stride, const int32_t* src_rows,
                           int64_t count, int width) const;
  absl::Status Logits(float* logits, const float* x, int64_t rows) const;

 private:
  const ModelConfig& c_;
  const ModelWeights& w_;
};

static_assert(graph::CheckLayerOps<CpuLayerOps>());

}  // namespace tnmt
