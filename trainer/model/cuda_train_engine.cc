// CUDA TrainEngine; see cuda_train_engine.h.
//
// Device state: flat float32 arrays (flat_layout.h) for the parameters, gradients and both Adam
// moments; in mixed precision a float16/bfloat16 copy of the parameters, refreshed after every
// update; the sinusoid tables; double[3] loss sums of the current micro-batch and double[4]
// update totals {loss, nll, tokens, stop, save}.
//
// The update (gradient norm, float16 loss scaling, Adam, the buckets' order) is trainer/optim's
// FlatOptimizer, the CPU engine's code, here over device kernels.
//
// Streams: everything computes on the Context's stream. With several ranks a second stream
// carries NCCL: when the backward of the update's last micro-batch finishes a bucket's last
// stage, an event recorded on the compute stream is waited for by the NCCL stream, which then
// all-reduces the bucket while the backward continues below it. AllReduce queues the totals'
// reduction after the last bucket and makes the compute stream wait for the NCCL stream before
// anything reads the gradients again. Every rank queues the same NCCL calls in the same order
// (buckets in layout order, then the totals), so the sums are deterministic and identical.
#include "trainer/model/cuda_train_engine.h"

#include <climits>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "kernels/cuda/adam.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gpu_timeline.h"
#include "kernels/cuda/reduce.h"
#include "trainer/collective/nccl_collective.h"
#include "trainer/model/cuda_train_model.h"
#include "trainer/model/flat_layout.h"
#include "trainer/model/parameters.h"
#include "trainer/optim/flat_optimizer.h"

namespace tnmt::train {

namespace {

namespace k = kernels::cuda;
using k::DeviceBuffer;

LossScaling ScalingOf(const TrainEngineOptions& o) {
  LossScaling s;
  s.dynamic = o.precision == TrainPrecision::kFloat16;
  s.initial = o.initial_loss_scale;
  s.window = o.loss_scale_window;
  return s;
}

class CudaTrainEngine : public TrainEngine {
 public:
  CudaTrainEngine(const ModelConfig& c, FlatLayout layout, const TrainEngineOptions& o,
                  std::unique_ptr<k::Context> ctx)
      : c_(c), layout_(std::move(layout)), precision_(o.precision), bootstrap_(o.collective), ctx_(std::move(ctx)),
        model_(c_, layout_, ctx_.get(), o.precision), scaling_(ScalingOf(o)) {}

  ~CudaTrainEngine() override {
    // Nothing may still use the buffers, streams or events when they are released.
    if (comm_ != nullptr) cudaStreamSynchronize(comm_);
    ctx_->Synchronize().IgnoreError();
    nccl_.reset();
    for (cudaEvent_t e : bucket_events_) cudaEventDestroy(e);
    if (totals_ready_ != nullptr) cudaEventDestroy(totals_ready_);
    if (comm_done_ != nullptr) cudaEventDestroy(comm_done_);
    if (comm_ != nullptr) cudaStreamDestroy(comm_);
  }

  absl::Status Init(ModelWeights params, Adam adam) {
    const int64_t n = layout_.size();
    const size_t bytes = sizeof(float) * n;
    k::DeviceAllocator& alloc = ctx_->allocator();
    TNMT_ASSIGN_OR_RETURN(params_, alloc.Buffer(bytes));
    TNMT_ASSIGN_OR_RETURN(grads_, alloc.Buffer(bytes));
    TNMT_ASSIGN_OR_RETURN(m_, alloc.Buffer(bytes));
    TNMT_ASSIGN_OR_RETURN(v_, alloc.Buffer(bytes));
    TNMT_ASSIGN_OR_RETURN(sums_, alloc.Buffer(sizeof(double) * 3));
    TNMT_ASSIGN_OR_RETURN(totals_, alloc.Buffer(sizeof(double) * 5));
    TNMT_ASSIGN_OR_RETURN(norm_, alloc.Buffer(sizeof(double)));
    if (precision_ != TrainPrecision::kFloat32) {
      TNMT_ASSIGN_OR_RETURN(half_, alloc.Buffer(2 * static_cast<size_t>(n)));
    }
    staging_.resize(n);
    TNMT_RETURN_IF_ERROR(Upload(params, &params_));
    TNMT_RETURN_IF_ERROR(Upload(adam.m(), &m_));
    TNMT_RETURN_IF_ERROR(Upload(adam.v(), &v_));
    opt_ = std::make_unique<FlatOptimizer>(
        &layout_, FlatArrays{params_.as<float>(), grads_.as<float>(), m_.as<float>(), v_.as<float>()},
        FlatKernels{[this](const float* x, int64_t n) { return SumOfSquares(x, n); },
                    [this](float* w, float* m, float* v, const float* g, int64_t n, float scale,
                           const kernels::AdamOptions& o) {
                      return k::Timed(*ctx_, kernels::TimeCategory::kOptimizer,
                                      [&] { return k::AdamUpdate(*ctx_, w, m, v, g, n, scale, o); });
                    },
                    [this] { return RefreshHalf(); }},
        adam.options(), adam.step(), scaling_);
    if (c_.position_encoding != PositionEncoding::kLearned) {
      TNMT_ASSIGN_OR_RETURN(enc_sinusoid_, UploadTensor(params.encoder_positions));
      TNMT_ASSIGN_OR_RETURN(dec_sinusoid_, UploadTensor(params.decoder_positions));
    }
    TNMT_ASSIGN_OR_RETURN(host_params_, ZerosLike(c_, params));
    TNMT_ASSIGN_OR_RETURN(host_m_, ZerosLike(c_, params));
    TNMT_ASSIGN_OR_RETURN(host_v_, ZerosLike(c_, params));
    TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaMemsetAsync(grads_.get(), 0, bytes, ctx_->stream())));
    TNMT_RETURN_IF_ERROR(RefreshHalf());
    return ctx_->Synchronize();
  }

  // NCCL over the bootstrap's ranks, with the stream and events of the bucketed all-reduce.
  absl::Status InitNccl() {
    TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking)));
    TNMT_ASSIGN_OR_RETURN(nccl_, MakeNcclCollective(bootstrap_, ctx_->device(), comm_));
    bucket_events_.assign(layout_.buckets().size(), nullptr);
    for (cudaEvent_t& e : bucket_events_) {
      TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming)));
    }
    TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaEventCreateWithFlags(&totals_ready_, cudaEventDisableTiming)));
    return TNMT_CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
  }

  std::string Describe() const override {
    std::string s = absl::StrCat("cuda:", ctx_->device(), " (", ctx_->props().name, "), ",
                                 TrainPrecisionName(precision_));
    if (nccl_ != nullptr) {
      absl::StrAppend(&s, ", ", nccl_->world_size(), " ranks over NCCL (", layout_.buckets().size(),
                      " gradient buckets)");
    }
    return s;
  }

  absl::Status BeginStep(int micro_batches) override {
    TNMT_RETURN_IF_ERROR(
        TNMT_CUDA_CHECK(cudaMemsetAsync(grads_.get(), 0, sizeof(float) * layout_.size(), ctx_->stream())));
    TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaMemsetAsync(totals_.get(), 0, sizeof(double) * 5, ctx_->stream())));
    micro_batches_ = micro_batches;
    micro_done_ = 0;
    opt_->BeginStep();
    return absl::OkStatus();
  }

  absl::Status ForwardBackward(const TrainBatch& batch, const TrainStepOptions& options) override {
    TNMT_RETURN_IF_ERROR(ValidateBatch(c_, batch));
    // The last micro-batch's backward starts each bucket's all-reduce as soon as it is final.
    const bool overlap = nccl_ != nullptr && micro_done_ + 1 == micro_batches_;
    StageDone done;
    if (overlap) done = [this](int stage) { return LaunchBuckets(stage); };
    TNMT_RETURN_IF_ERROR(model_.Run(batch, options, Arrays(), static_cast<float>(opt_->loss_scale()), /*backward=*/true,
                                    sums_.as<double>(), done));
    TNMT_RETURN_IF_ERROR(k::Timed(*ctx_, kernels::TimeCategory::kAllReduce, [&] {
      return k::AddDoubles(*ctx_, totals_.as<double>(), sums_.as<double>(), 3);
    }));
    ++micro_done_;
    return absl::OkStatus();
  }

  absl::StatusOr<StepTotals> AllReduce(bool stop, bool save) override {
    double* totals = totals_.as<double>();
    TNMT_RETURN_IF_ERROR(k::Timed(*ctx_, kernels::TimeCategory::kAllReduce, [&]() -> absl::Status {
      TNMT_RETURN_IF_ERROR(k::StoreDouble(*ctx_, totals + 3, stop ? 1.0 : 0.0));
      return k::StoreDouble(*ctx_, totals + 4, save ? 1.0 : 0.0);
    }));
    if (nccl_ != nullptr) {
      TNMT_RETURN_IF_ERROR(LaunchBuckets(INT_MAX));  // any not started during a backward
      TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaEventRecord(totals_ready_, ctx_->stream())));
      TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaStreamWaitEvent(comm_, totals_ready_, 0)));
      TNMT_RETURN_IF_ERROR(nccl_->AllReduceSumAsync(totals, 5, comm_));
      TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaEventRecord(comm_done_, comm_)));
      TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaStreamWaitEvent(ctx_->stream(), comm_done_, 0)));
    }
    double host[5];
    TNMT_RETURN_IF_ERROR(
        TNMT_CUDA_CHECK(cudaMemcpyAsync(host, totals, sizeof(host), cudaMemcpyDeviceToHost, ctx_->stream())));
    TNMT_RETURN_IF_ERROR(ctx_->Synchronize());
    StepTotals t;
    t.loss_sum = host[0], t.nll_sum = host[1], t.tokens = host[2], t.stop = host[3] > 0, t.save = host[4] > 0;
    return t;
  }

  absl::StatusOr<double> GradNorm() override { return opt_->GradNorm(); }

  absl::StatusOr<bool> AdamStep(double lr, float grad_scale) override { return opt_->AdamStep(lr, grad_scale); }

  double loss_scale() const override { return opt_->loss_scale(); }

  absl::StatusOr<LossStats> EvaluateLoss(const TrainBatch& batch, float label_smoothing) override {
    TNMT_RETURN_IF_ERROR(ValidateBatch(c_, batch));
    TrainStepOptions o;
    o.dropout = 0.0f;
    o.label_smoothing = label_smoothing;
    TNMT_RETURN_IF_ERROR(model_.Run(batch, o, Arrays(), 1.0f, /*backward=*/false, sums_.as<double>(), nullptr));
    double host[3];
    TNMT_RETURN_IF_ERROR(
        TNMT_CUDA_CHECK(cudaMemcpyAsync(host, sums_.get(), sizeof(host), cudaMemcpyDeviceToHost, ctx_->stream())));
    TNMT_RETURN_IF_ERROR(ctx_->Synchronize());
    LossStats s;
    s.loss_sum = host[0];
    s.nll_sum = host[1];
    s.tokens = static_cast<int64_t>(std::llround(host[2]));
    return s;
  }

  absl::StatusOr<HostState> Snapshot() override {
    TNMT_RETURN_IF_ERROR(Download(params_, &host_params_));
    TNMT_RETURN_IF_ERROR(Download(m_, &host_m_));
    TNMT_RETURN_IF_ERROR(Download(v_, &host_v_));
    HostState h;
    h.params = &host_params_;
    h.adam_m = &host_m_;
    h.adam_v = &host_v_;
    h.adam_step = opt_->step();
    return h;
  }

  absl::Status CopyGradients(ModelWeights* out) override { return Download(grads_, out); }
  absl::StatusOr<kernels::TimeAccount> TakeDeviceTimes() override { return k::TakeDeviceTimes(*ctx_); }

 private:
  CudaModelArrays Arrays() const {
    CudaModelArrays a;
    a.params = params_.as<float>();
    a.half = half_.get();
    a.grads = grads_.as<float>();
    a.encoder_sinusoid = enc_sinusoid_.as<float>();
    a.decoder_sinusoid = dec_sinusoid_.as<float>();
    return a;
  }

  // Starts the all-reduce of every bucket whose last stage is <= `stage`, in layout order.
  absl::Status LaunchBuckets(int stage) {
    return opt_->ReduceBuckets(stage, [this](size_t index, const GradBucket& b) -> absl::Status {
      cudaEvent_t ready = bucket_events_[index];
      TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaEventRecord(ready, ctx_->stream())));
      TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaStreamWaitEvent(comm_, ready, 0)));
      return nccl_->AllReduceSumAsync(grads_.as<float>() + b.offset, b.count, comm_);
    });
  }

  // The sum of squares of x[0, n) on the host, after everything queued so far.
  absl::StatusOr<double> SumOfSquares(const float* x, int64_t n) {
    TNMT_RETURN_IF_ERROR(k::Timed(*ctx_, kernels::TimeCategory::kOptimizer,
                                  [&] { return k::SumOfSquares(*ctx_, norm_.as<double>(), x, n); }));
    double sum = 0;
    TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(
        cudaMemcpyAsync(&sum, norm_.get(), sizeof(double), cudaMemcpyDeviceToHost, ctx_->stream())));
    TNMT_RETURN_IF_ERROR(ctx_->Synchronize());
    return sum;
  }

  absl::Status RefreshHalf() {
    if (precision_ == TrainPrecision::kFloat32) return absl::OkStatus();
    const k::DType t = precision_ == TrainPrecision::kFloat16 ? k::DType::kFloat16 : k::DType::kBFloat16;
    return k::Timed(*ctx_, kernels::TimeCategory::kOptimizer,
                    [&] { return k::Convert(*ctx_, half_.get(), t, params_.get(), k::DType::kFloat32, layout_.size()); });
  }

  // Host ModelWeights -> a flat device array (waits for the copy: staging_ is reused).
  absl::Status Upload(const ModelWeights& w, DeviceBuffer* dst) {
    TNMT_RETURN_IF_ERROR(layout_.Gather(c_, w, staging_.data()));
    TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaMemcpyAsync(dst->get(), staging_.data(), sizeof(float) * layout_.size(),
                                                         cudaMemcpyHostToDevice, ctx_->stream())));
    return ctx_->Synchronize();
  }
  absl::StatusOr<DeviceBuffer> UploadTensor(const Tensor& t) {
    TNMT_ASSIGN_OR_RETURN(DeviceBuffer b, ctx_->allocator().Buffer(sizeof(float) * t.numel()));
    TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(
        cudaMemcpyAsync(b.get(), t.f32(), sizeof(float) * t.numel(), cudaMemcpyHostToDevice, ctx_->stream())));
    TNMT_RETURN_IF_ERROR(ctx_->Synchronize());
    return b;
  }
  // A flat device array -> host ModelWeights, after everything queued so far.
  absl::Status Download(const DeviceBuffer& src, ModelWeights* w) {
    TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaMemcpyAsync(staging_.data(), src.get(), sizeof(float) * layout_.size(),
                                                         cudaMemcpyDeviceToHost, ctx_->stream())));
    TNMT_RETURN_IF_ERROR(ctx_->Synchronize());
    return layout_.Scatter(c_, staging_.data(), w);
  }

  const ModelConfig c_;
  const FlatLayout layout_;
  const TrainPrecision precision_;
  Collective* bootstrap_;
  // Declared before every device buffer: the Context (and its allocator) is destroyed last.
  std::unique_ptr<k::Context> ctx_;
  CudaTrainModel model_;
  std::unique_ptr<NcclCollective> nccl_;
  cudaStream_t comm_ = nullptr;
  std::vector<cudaEvent_t> bucket_events_;
  cudaEvent_t totals_ready_ = nullptr, comm_done_ = nullptr;

  DeviceBuffer params_, grads_, m_, v_, half_, enc_sinusoid_, dec_sinusoid_;
  DeviceBuffer sums_;    // double[3]: the current micro-batch's loss sums
  DeviceBuffer totals_;  // double[5]: the update's {loss, nll, tokens, stop, save}
  DeviceBuffer norm_;    // double[1]: sum of squares of the gradients
  std::vector<float> staging_;  // host copy of one flat array
  ModelWeights host_params_, host_m_, host_v_;

  const LossScaling scaling_;
  std::unique_ptr<FlatOptimizer> opt_;  // over the buffers above
  int micro_batches_ = 1, micro_done_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TrainEngine>> MakeCudaTrainEngine(const ModelConfig& c,
                                                                 const TrainEngineOptions& options,
                                                                 ModelWeights params, Adam adam) {
  if (!options.device.cuda) return absl::InvalidArgumentError("MakeCudaTrainEngine: the device is not cuda");
  if (options.collective == nullptr) return absl::InvalidArgumentError("MakeCudaTrainEngine: no collective");
  TNMT_RETURN_IF_ERROR(ValidateLossScaling(ScalingOf(options)));
  int count = 0;
  TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaGetDeviceCount(&count)));
  if (count == 0) return absl::FailedPreconditionError("\"device\" cuda: no CUDA device is visible");
  const int device = options.device.index >= 0 ? options.device.index : options.collective->rank() % count;
  if (device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"device\" cuda:", device, ": only ", count, " CUDA device(s) visible (cuda:0..", count - 1, ")"));
  }
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<k::Context> ctx, k::Context::Create(device));
  TNMT_ASSIGN_OR_RETURN(FlatLayout layout, FlatLayout::Create(c, params, options.bucket_bytes));
  auto engine = std::make_unique<CudaTrainEngine>(c, std::move(layout), options, std::move(ctx));
  TNMT_RETURN_IF_ERROR(engine->Init(std::move(params), std::move(adam)));
  if (options.collective->world_size() > 1 || options.force_nccl) TNMT_RETURN_IF_ERROR(engine->InitNccl());
  return std::unique_ptr<TrainEngine>(std::move(engine));
}

}  // namespace tnmt::train
