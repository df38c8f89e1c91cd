// CPU TrainEngine; see cpu_train_engine.h.
//
// State: four flat float32 arrays of the FlatLayout (parameters, gradients, Adam's moments),
// with ModelWeights views over them for the forward/backward, the snapshots and checkpoints.
// The update (bucketed all-reduce order, gradient norm, Adam) is trainer/optim's FlatOptimizer,
// the CUDA engine's code, here over host loops.
#include "trainer/model/cpu_train_engine.h"

#include <climits>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "kernels/cpu/adam.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "trainer/model/flat_layout.h"
#include "trainer/model/parameters.h"
#include "trainer/optim/flat_optimizer.h"

namespace tnmt::train {

namespace {

// In order, in double: the same value for any thread count.
absl::StatusOr<double> HostSumOfSquares(const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

absl::Status HostAdamUpdate(float* w, float* m, float* v, const float* g, int64_t n, float grad_scale,
                            const kernels::AdamOptions& o) {
  kernels::cpu::AdamUpdate(w, m, v, g, n, grad_scale, o);
  return absl::OkStatus();
}

// The flat arrays and their ModelWeights views.
struct FlatState {
  Tensor params_flat, grads_flat, m_flat, v_flat;  // [layout.size()]
  ModelWeights params, grads, m, v;
};

class CpuTrainEngine : public TrainEngine {
 public:
  CpuTrainEngine(const ModelConfig& c, Collective* coll, bool bf16, FlatLayout layout, FlatState s,
                 const kernels::AdamOptions& adam, int64_t adam_step)
      : c_(c), coll_(coll), bf16_(bf16), layout_(std::move(layout)), s_(std::move(s)),
        opt_(&layout_, {s_.params_flat.f32(), s_.grads_flat.f32(), s_.m_flat.f32(), s_.v_flat.f32()},
             {HostSumOfSquares, HostAdamUpdate, nullptr}, adam, adam_step, LossScaling()) {}

  std::string Describe() const override {
    const std::string what = bf16_ ? "cpu, bfloat16 GEMMs (float32 weights, gradients and optimizer)" : "cpu, float32";
    return coll_->world_size() > 1 ? absl::StrCat(what, ", ", coll_->world_size(), " ranks") : what;
  }

  absl::Status BeginStep(int) override {
    std::memset(s_.grads_flat.f32(), 0, sizeof(float) * layout_.size());
    sums_ = LossStats();
    opt_.BeginStep();
    return absl::OkStatus();
  }

  absl::Status ForwardBackward(const TrainBatch& batch, const TrainStepOptions& options) override {
    TrainStepOptions o = options;
    o.bfloat16_gemms = bf16_;
    TNMT_ASSIGN_OR_RETURN(LossStats s, train::ForwardBackward(c_, s_.params, batch, o, 1.0f, &s_.grads));
    sums_.loss_sum += s.loss_sum;
    sums_.nll_sum += s.nll_sum;
    sums_.tokens += s.tokens;
    return absl::OkStatus();
  }

  absl::StatusOr<StepTotals> AllReduce(bool stop, bool save) override {
    if (coll_->world_size() > 1) {
      float* grads = s_.grads_flat.f32();
      TNMT_RETURN_IF_ERROR(opt_.ReduceBuckets(INT_MAX, [&](size_t, const GradBucket& b) {
        return coll_->AllReduceSum(grads + b.offset, b.count);
      }));
    }
    double s[5] = {sums_.loss_sum, sums_.nll_sum, static_cast<double>(sums_.tokens), stop ? 1.0 : 0.0,
                   save ? 1.0 : 0.0};
    TNMT_RETURN_IF_ERROR(coll_->AllReduceSum(s, 5));
    StepTotals t;
    t.loss_sum = s[0], t.nll_sum = s[1], t.tokens = s[2], t.stop = s[3] > 0, t.save = s[4] > 0;
    return t;
  }

  absl::StatusOr<double> GradNorm() override { return opt_.GradNorm(); }

  absl::StatusOr<bool> AdamStep(double lr, float grad_scale) override { return opt_.AdamStep(lr, grad_scale); }

  absl::StatusOr<LossStats> EvaluateLoss(const TrainBatch& batch, float label_smoothing) override {
    return train::EvaluateLoss(c_, s_.params, batch, label_smoothing);
  }

  absl::StatusOr<HostState> Snapshot() override {
    HostState h;
    h.params = &s_.params;
    h.adam_m = &s_.m;
    h.adam_v = &s_.v;
    h.adam_step = opt_.step();
    return h;
  }

  absl::Status CopyGradients(ModelWeights* out) override {
    return layout_.Scatter(c_, s_.grads_flat.f32(), out);
  }

 private:
  const ModelConfig c_;
  Collective* coll_;
  const bool bf16_;  // TrainPrecision::kBFloat16: GemmBf16 for the linears
  const FlatLayout layout_;
  FlatState s_;
  FlatOptimizer opt_;
  LossStats sums_;
};

// A flat array holding `w`'s trainable tensors, and `w` with views of it.
absl::Status FlatCopy(const ModelConfig& c, const FlatLayout& layout, const ModelWeights& w, Tensor* flat,
                      ModelWeights* views) {
  TNMT_ASSIGN_OR_RETURN(*flat, Tensor::Empty({layout.size()}));
  TNMT_RETURN_IF_ERROR(layout.Gather(c, w, flat->f32()));
  TNMT_ASSIGN_OR_RETURN(*views, layout.Views(c, w, *flat));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainEngine>> MakeCpuTrainEngine(const ModelConfig& c,
                                                                const TrainEngineOptions& options,
                                                                ModelWeights params, Adam adam) {
  if (options.device.cuda) return absl::InvalidArgumentError("MakeCpuTrainEngine: the device is not the CPU");
  if (options.precision == TrainPrecision::kFloat16) {
    return absl::InvalidArgumentError(
        "\"dtype\" float16 needs a GPU; training on the CPU is float32, or bfloat16 on CPUs with AVX-512 BF16");
  }
  const bool bf16 = options.precision == TrainPrecision::kBFloat16;
  if (bf16 && !kernels::cpu::HasBf16Gemm()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"dtype\" bfloat16 on the CPU needs AVX-512 BF16 (e.g. AMD Zen 4, Intel Sapphire Rapids), which this CPU ",
        kernels::cpu::HasAvx512Bf16() ? "has but the kernel level set by TNMT_CPU_ISA (" : "lacks (kernel level ",
        kernels::cpu::IsaName(kernels::cpu::ActiveIsa()), "); train in float32"));
  }
  if (options.collective == nullptr) return absl::InvalidArgumentError("MakeCpuTrainEngine: no collective");
  TNMT_ASSIGN_OR_RETURN(FlatLayout layout, FlatLayout::Create(c, params, options.bucket_bytes));
  FlatState s;
  TNMT_RETURN_IF_ERROR(FlatCopy(c, layout, params, &s.params_flat, &s.params));
  // Gradients get their own untrained tensors, so no backward can write into the parameters'.
  TNMT_ASSIGN_OR_RETURN(ModelWeights zeros, ZerosLike(c, params));
  TNMT_ASSIGN_OR_RETURN(s.grads_flat, Tensor::Zeros({layout.size()}));
  TNMT_ASSIGN_OR_RETURN(s.grads, layout.Views(c, zeros, s.grads_flat));
  TNMT_RETURN_IF_ERROR(FlatCopy(c, layout, adam.m(), &s.m_flat, &s.m));
  TNMT_RETURN_IF_ERROR(FlatCopy(c, layout, adam.v(), &s.v_flat, &s.v));
  return std::unique_ptr<TrainEngine>(
      new CpuTrainEngine(c, options.collective, bf16, std::move(layout), std::move(s), adam.options(), adam.step()));
}

}  // namespace tnmt::train
