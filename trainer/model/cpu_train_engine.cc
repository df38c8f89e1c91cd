// CPU TrainEngine; see cpu_train_engine.h.
#include "trainer/model/cpu_train_engine.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "trainer/model/parameters.h"

namespace tnmt::train {

namespace {

// Flattens every gradient tensor into one buffer, all-reduces it, and copies back.
absl::Status AllReduceGradients(Collective* c, const ModelConfig& config, ModelWeights* grads,
                                std::vector<float>* flat) {
  if (c->world_size() == 1) return absl::OkStatus();
  auto refs = TrainableParams(config, grads);
  int64_t n = 0;
  for (ParamRef& r : refs) n += r.tensor->numel();
  flat->resize(n);
  int64_t off = 0;
  for (ParamRef& r : refs) {
    std::copy(r.tensor->f32(), r.tensor->f32() + r.tensor->numel(), flat->data() + off);
    off += r.tensor->numel();
  }
  TNMT_RETURN_IF_ERROR(c->AllReduceSum(flat->data(), n));
  off = 0;
  for (ParamRef& r : refs) {
    std::copy(flat->data() + off, flat->data() + off + r.tensor->numel(), r.tensor->f32());
    off += r.tensor->numel();
  }
  return absl::OkStatus();
}

class CpuTrainEngine : public TrainEngine {
 public:
  CpuTrainEngine(const ModelConfig& c, Collective* coll, bool bf16, ModelWeights params, Adam adam,
                 ModelWeights grads)
      : c_(c), coll_(coll), bf16_(bf16), params_(std::move(params)), adam_(std::move(adam)),
        grads_(std::move(grads)) {}

  std::string Describe() const override {
    const std::string what = bf16_ ? "cpu, bfloat16 GEMMs (float32 weights, gradients and optimizer)" : "cpu, float32";
    return coll_->world_size() > 1 ? absl::StrCat(what, ", ", coll_->world_size(), " ranks") : what;
  }

  absl::Status BeginStep(int) override {
    ZeroAll(c_, &grads_);
    sums_ = LossStats();
    return absl::OkStatus();
  }

  absl::Status ForwardBackward(const TrainBatch& batch, const TrainStepOptions& options) override {
    TrainStepOptions o = options;
    o.bfloat16_gemms = bf16_;
    TNMT_ASSIGN_OR_RETURN(LossStats s, train::ForwardBackward(c_, params_, batch, o, 1.0f, &grads_));
    sums_.loss_sum += s.loss_sum;
    sums_.nll_sum += s.nll_sum;
    sums_.tokens += s.tokens;
    return absl::OkStatus();
  }

  absl::StatusOr<StepTotals> AllReduce(bool stop, bool save) override {
    TNMT_RETURN_IF_ERROR(AllReduceGradients(coll_, c_, &grads_, &flat_));
    double s[5] = {sums_.loss_sum, sums_.nll_sum, static_cast<double>(sums_.tokens), stop ? 1.0 : 0.0,
                   save ? 1.0 : 0.0};
    TNMT_RETURN_IF_ERROR(coll_->AllReduceSum(s, 5));
    StepTotals t;
    t.loss_sum = s[0], t.nll_sum = s[1], t.tokens = s[2], t.stop = s[3] > 0, t.save = s[4] > 0;
    return t;
  }

  absl::StatusOr<double> GradNorm() override { return GlobalGradNorm(c_, &grads_); }

  absl::StatusOr<bool> AdamStep(double lr, float grad_scale) override {
    adam_.Step(&params_, &grads_, lr, grad_scale);
    return true;
  }

  absl::StatusOr<LossStats> EvaluateLoss(const TrainBatch& batch, float label_smoothing) override {
    return train::EvaluateLoss(c_, params_, batch, label_smoothing);
  }

  absl::StatusOr<HostState> Snapshot() override {
    HostState h;
    h.params = &params_;
    h.adam_m = &adam_.m();
    h.adam_v = &adam_.v();
    h.adam_step = adam_.step();
    return h;
  }

  absl::Status CopyGradients(ModelWeights* out) override {
    auto src = TrainableParams(c_, &grads_);
    auto dst = TrainableParams(c_, out);
    if (src.size() != dst.size()) return absl::InvalidArgumentError("CopyGradients: model structures differ");
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i].tensor->numel() != dst[i].tensor->numel()) {
        return absl::InvalidArgumentError(absl::StrCat("CopyGradients: ", src[i].name, " shapes differ"));
      }
      std::copy(src[i].tensor->f32(), src[i].tensor->f32() + src[i].tensor->numel(), dst[i].tensor->f32());
    }
    return absl::OkStatus();
  }

 private:
  const ModelConfig c_;
  Collective* coll_;
  const bool bf16_;  // TrainPrecision::kBFloat16: GemmBf16 for the linears
  ModelWeights params_;
  Adam adam_;
  ModelWeights grads_;
  LossStats sums_;
  std::vector<float> flat_;  // all-reduce staging, kept between updates
};

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
  TNMT_ASSIGN_OR_RETURN(ModelWeights grads, ZerosLike(c, params));
  return std::unique_ptr<TrainEngine>(
      new CpuTrainEngine(c, options.collective, bf16, std::move(params), std::move(adam), std::move(grads)));
}

}  // namespace tnmt::train
