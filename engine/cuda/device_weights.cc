// DeviceWeights: planning the one allocation, then copying and converting; see
// device_weights.h.
#include "engine/cuda/device_weights.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/convert.h"

namespace tnmt::cuda_engine {

namespace kc = kernels::cuda;

namespace {

constexpr int64_t kAlign = 256;
// Elements converted per chunk (float32 staging of 16 MiB).
constexpr int64_t kChunk = int64_t{4} << 20;

// The tensors to upload, each once (host tensors sharing storage share the device copy), at
// aligned offsets of one allocation.
class UploadPlan {
 public:
  // Adds host float32 tensor `t`, stored on the device as `type`; `set` receives its device
  // address once uploaded.
  void Add(const Tensor& t, kc::DType type, const char* what, std::function<void(const void*)> set) {
    if (!status_.ok()) return;
    if (t.empty() || t.dtype() != DType::kFloat32) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat("weight ", what, " is not a host float32 tensor"));
      return;
    }
    const auto key = std::make_tuple(static_cast<const void*>(t.data<char>()), t.numel(),
                                     static_cast<int>(type));
    auto it = index_.find(key);
    if (it == index_.end()) {
      Item item{&t, type, (bytes_ + kAlign - 1) / kAlign * kAlign, {}};
      bytes_ = item.offset + t.numel() * kc::DTypeBytes(type);
      it = index_.emplace(key, items_.size()).first;
      items_.push_back(std::move(item));
    }
    items_[it->second].setters.push_back(std::move(set));
  }
  const absl::Status& status() const { return status_; }
  int64_t bytes() const { return bytes_; }

  // Copies every tensor to base (bytes() long) on ctx's stream, converting on the device
  // through a float32 staging buffer, then waits for the copies.
  absl::Status Upload(kc::Context& ctx, char* base) {
    int64_t staging_elems = 0;
    for (const Item& item : items_) {
      if (item.type != kc::DType::kFloat32) {
        staging_elems = std::max(staging_elems, std::min(item.tensor->numel(), kChunk));
      }
    }
    TNMT_ASSIGN_OR_RETURN(kc::DeviceBuffer staging,
                          ctx.allocator().Buffer(static_cast<size_t>(staging_elems) * sizeof(float)));
    for (const Item& item : items_) {
      const float* host = item.tensor->f32();
      const int64_t n = item.tensor->numel();
      char* dst = base + item.offset;
      if (item.type == kc::DType::kFloat32) {
        TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaMemcpyAsync(
            dst, host, static_cast<size_t>(n) * sizeof(float), cudaMemcpyHostToDevice, ctx.stream())));
      } else {
        const int64_t elem = kc::DTypeBytes(item.type);
        for (int64_t begin = 0; begin < n; begin += kChunk) {
          const int64_t count = std::min(kChunk, n - begin);
          TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(
              cudaMemcpyAsync(staging.get(), host + begin, static_cast<size_t>(count) * sizeof(float),
                              cudaMemcpyHostToDevice, ctx.stream())));
          TNMT_RETURN_IF_ERROR(kc::Convert(ctx, dst + begin * elem, item.type, staging.get(),
                                           kc::DType::kFloat32, count));
        }
      }
      for (const auto& set : item.setters) set(dst);
    }
    // The host tensors and the staging buffer must stay until the copies are done.
    return ctx.Synchronize();
  }

 private:
  struct Item {
    const Tensor* tensor;
    kc::DType type;
    int64_t offset;
    std::vector<std::function<void(const void*)>> setters;
  };
  absl::Status status_;
  int64_t bytes_ = 0;
  std::vector<Item> items_;
  std::map<std::tuple<const void*, int64_t, int>, size_t> index_;
};

void AddLinear(UploadPlan& plan, const Linear& l, kc::DType type, const std::string& what,
               DeviceLinear* out) {
  if (l.weight.rank() != 2) {
    plan.Add(Tensor(), type, what.c_str(), nullptr);  // records the error
    return;
  }
  out->out = static_cast<int>(l.weight.dim(0));
  out->in = static_cast<int>(l.weight.dim(1));
  plan.Add(l.weight, type, what.c_str(), [out](const void* p) { out->weight = p; });
  if (!l.bias.empty()) {
    plan.Add(l.bias, kc::DType::kFloat32, what.c_str(),
             [out](const void* p) { out->bias = static_cast<const float*>(p); });
  }
}

void AddLayerNorm(UploadPlan& plan, const LayerNormWeights& ln, const std::string& what,
                  DeviceLayerNorm* out) {
  plan.Add(ln.gamma, kc::DType::kFloat32, what.c_str(),
           [out](const void* p) { out->gamma = static_cast<const float*>(p); });
  plan.Add(ln.beta, kc::DType::kFloat32, what.c_str(),
           [out](const void* p) { out->beta = static_cast<const float*>(p); });
}

}  // namespace

absl::StatusOr<std::shared_ptr<const DeviceWeights>> DeviceWeights::Upload(
    const ModelConfig& c, const ModelWeights& w, int device, kc::DType dtype) {
  std::shared_ptr<DeviceWeights> dw(new DeviceWeights());
  dw->config_ = c;
  dw->device_ = device;
  dw->dtype_ = dtype;
  dw->position_rows = MaxPositions(c);
  if (static_cast<int>(w.encoder.size()) != c.encoder_layers ||
      static_cast<int>(w.decoder.size()) != c.decoder_layers) {
    return absl::InvalidArgumentError("DeviceWeights: layer counts disagree with the config");
  }
  if (w.encoder_positions.rank() != 2 || w.encoder_positions.dim(0) < dw->position_rows ||
      w.decoder_positions.rank() != 2 || w.decoder_positions.dim(0) < dw->position_rows) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceWeights: position tables hold fewer than ",
                                                   dw->position_rows, " rows"));
  }
  TNMT_ASSIGN_OR_RETURN(dw->ctx_, kc::Context::Create(device, /*workspace_bytes=*/0));

  // Every tensor of the model tree, in its order: vocabulary tables (GEMM operands) in dtype,
  // position tables and the logits bias in float32. Layers sized before any address into them
  // is taken.
  UploadPlan plan;
  ResizeLayers(c, *dw);
  VisitModel(MakeModelVisitor(
                 [&plan, dtype](const TableInfo& t, const Tensor& x, auto& o) {
                   using Pointer = std::remove_reference_t<decltype(o)>;
                   const kc::DType type = t.kind == TableKind::kEmbedding ? dtype : kc::DType::kFloat32;
                   plan.Add(x, type, t.name, [&o](const void* p) { o = static_cast<Pointer>(p); });
                 },
                 [&plan, dtype](const Site& s, const LinearGroup& g, const Linear& l, DeviceLinear& o) {
                   AddLinear(plan, l, dtype, s.Name(g.name), &o);
                 },
                 [&plan](const Site& s, const char* name, const LayerNormWeights& ln, DeviceLayerNorm& o) {
                   AddLayerNorm(plan, ln, s.Name(name), &o);
                 }),
             c, w, *dw);
  TNMT_RETURN_IF_ERROR(plan.status());

  dw->bytes_ = plan.bytes();
  absl::StatusOr<kc::DeviceBuffer> arena = dw->ctx_->allocator().Buffer(static_cast<size_t>(plan.bytes()));
  if (!arena.ok()) {
    return absl::Status(arena.status().code(),
                        absl::StrCat("weights need ", plan.bytes(), " bytes of device memory in ",
                                     kc::DTypeName(dtype), ": ", arena.status().message()));
  }
  dw->arena_ = *std::move(arena);
  TNMT_RETURN_IF_ERROR(plan.Upload(*dw->ctx_, dw->arena_.as<char>()));
  TieModel(c, *dw);
  // The staging buffer went back to the cache: hand that memory back to the device.
  TNMT_RETURN_IF_ERROR(dw->ctx_->allocator().ReleaseCache());
  return std::shared_ptr<const DeviceWeights>(std::move(dw));
}

DeviceWeights::~DeviceWeights() {
  if (ctx_ != nullptr) (void)ctx_->Activate();
  arena_.Reset();
}

}  // namespace tnmt::cuda_engine
