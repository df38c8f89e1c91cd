// MakeCpuBackend; see cpu_backend.h.
#include "engine/cpu/cpu_backend.h"

#include <utility>

#include "engine/cpu/cpu_step_model.h"

namespace tnmt {

namespace {

class CpuBackend : public DecodeBackend {
 public:
  CpuBackend(const ModelConfig& c, const ModelWeights& w, std::string describe,
             std::shared_ptr<const Shortlist> shortlist)
      : c_(c), w_(w), describe_(std::move(describe)), shortlist_(std::move(shortlist)) {}

  absl::StatusOr<std::unique_ptr<StepModel>> NewStepModel() const override {
    absl::StatusOr<std::unique_ptr<CpuStepModel>> m = CpuStepModel::Create(c_, w_, shortlist_.get());
    if (!m.ok()) return m.status();
    return std::unique_ptr<StepModel>(*std::move(m));
  }
  std::string Describe() const override { return describe_; }
  int64_t weight_bytes() const override { return w_.Bytes(c_); }

 private:
  const ModelConfig& c_;
  const ModelWeights& w_;
  const std::string describe_;
  const std::shared_ptr<const Shortlist> shortlist_;
};

}  // namespace

std::unique_ptr<DecodeBackend> MakeCpuBackend(const ModelConfig& c, const ModelWeights& w,
                                              std::string describe,
                                              std::shared_ptr<const Shortlist> shortlist) {
  return std::make_unique<CpuBackend>(c, w, std::move(describe), std::move(shortlist));
}

}  // namespace tnmt
