// MakeCudaBackend in CUDA builds: the weights uploaded once (DeviceWeights), shared by the
// CudaStepModels made from them; see cuda_backend.h.
#include "engine/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/cuda/cuda_beam_stepper.h"
#include "engine/cuda/cuda_step_model.h"
#include "engine/cuda/device_weights.h"

namespace tnmt {

namespace kc = kernels::cuda;

namespace {

class CudaDecodeBackend : public DecodeBackend {
 public:
  CudaDecodeBackend(std::shared_ptr<const cuda_engine::DeviceWeights> w,
                    const CudaStepOptions& options)
      : w_(std::move(w)), options_(options) {}

  // Thread-safe: the weights are read-only; each StepModel gets its own Context.
  absl::StatusOr<std::unique_ptr<StepModel>> NewStepModel() const override {
    TNMT_ASSIGN_OR_RETURN(std::unique_ptr<CudaStepModel> m, CudaStepModel::Create(w_, options_));
    return std::unique_ptr<StepModel>(std::move(m));
  }
  std::string Describe() const override {
    return absl::StrCat("cuda:", w_->device(), " ", kc::DTypeName(w_->dtype()));
  }
  int64_t weight_bytes() const override { return w_->bytes(); }

 private:
  std::shared_ptr<const cuda_engine::DeviceWeights> w_;
  const CudaStepOptions options_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DecodeBackend>> MakeCudaBackend(const ModelConfig& c,
                                                               const ModelWeights& w,
                                                               const CudaPlacement& p) {
  TNMT_RETURN_IF_ERROR(c.CheckCudaSupport());
  const DType dtype = p.dtype;
  if (dtype != DType::kFloat32 && dtype != DType::kFloat16 && dtype != DType::kBFloat16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weights in ", DTypeName(dtype), ": the CUDA engine takes float32, float16 or bfloat16"));
  }
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat("no usable CUDA device: ", cudaGetErrorName(e),
                                                      " (", cudaGetErrorString(e), ")"));
  }
  if (count == 0) return absl::FailedPreconditionError("no usable CUDA device: none visible");
  if (p.device < 0 || p.device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", p.device,
                                                   " does not exist: this machine has ", count,
                                                   count == 1 ? " device" : " devices",
                                                   count > 0 ? absl::StrCat(" (cuda:0 to cuda:", count - 1, ")") : ""));
  }
  absl::StatusOr<std::shared_ptr<const cuda_engine::DeviceWeights>> dw =
      cuda_engine::DeviceWeights::Upload(c, w, p.device, dtype);
  if (!dw.ok()) {
    return absl::Status(dw.status().code(), absl::StrCat("cuda:", p.device, ": ", dw.status().message()));
  }
  CudaStepOptions options;
  options.cuda_graphs = p.cuda_graphs;
  return std::unique_ptr<DecodeBackend>(new CudaDecodeBackend(*std::move(dw), options));
}

std::unique_ptr<FlatBeamStepper> NewCudaBeamStepper(const StepModel& model) {
  if (dynamic_cast<const CudaStepModel*>(&model) == nullptr) return nullptr;
  return std::make_unique<CudaBeamStepper>();
}

bool CudaBuild() { return true; }

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

}  // namespace tnmt
