// Flat parameter layout and gradient buckets; see flat_layout.h.
#include "trainer/model/flat_layout.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "trainer/model/parameters.h"

namespace tnmt::train {

namespace {

int64_t RoundUp(int64_t n, int64_t align) { return (n + align - 1) / align * align; }

// The backward stage that finishes the gradient of the tensor at `at`. A tied table is visited
// as its source, whose stage is the tie's last use: the encoder's embeddings come after the
// decoder's, the decoder's after the output projection.
int StageOf(const TensorAt& at, const BackwardStages& s) {
  if (at.table != nullptr) {
    switch (at.table->role) {
      case TableRole::kEncoderEmbed:
      case TableRole::kEncoderPositions:
        return s.encoder_embed();
      case TableRole::kDecoderEmbed:
      case TableRole::kDecoderPositions:
        return s.decoder_embed();
      case TableRole::kOutputProjection:
      case TableRole::kFinalLogitsBias:
        return s.output();
    }
  }
  const bool encoder = at.site.stack == Stack::kEncoder;
  if (at.site.layer < 0) return encoder ? s.encoder_final_ln() : s.decoder_final_ln();
  return encoder ? s.encoder_layer(at.site.layer) : s.decoder_layer(at.site.layer);
}

}  // namespace

absl::StatusOr<FlatLayout> FlatLayout::Create(const ModelConfig& c, const ModelWeights& w, int64_t bucket_bytes) {
  if (static_cast<int>(w.encoder.size()) != c.encoder_layers ||
      static_cast<int>(w.decoder.size()) != c.decoder_layers) {
    return absl::InvalidArgumentError("FlatLayout: layer counts disagree with the config");
  }
  FlatLayout L;
  L.stages_.encoder_layers = c.encoder_layers;
  L.stages_.decoder_layers = c.decoder_layers;
  ResizeLayers(c, L.model_);

  // The trained tensors in TrainableParams' order (the tree's), each with its stage and the
  // FlatModel offset that describes it; then ordered by stage, the tree's order within one.
  std::vector<FlatTensor> listed;
  std::vector<int64_t*> slots;
  VisitTrained(
      c,
      [&](const TensorAt& at, const Tensor& t, int64_t& slot) {
        FlatTensor f;
        f.name = at.name;
        f.param_index = static_cast<int>(listed.size());
        f.numel = t.numel();
        f.stage = StageOf(at, L.stages_);
        listed.push_back(std::move(f));
        slots.push_back(&slot);
      },
      w, L.model_);
  std::vector<int> order(listed.size());
  for (size_t i = 0; i < listed.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return listed[a].stage < listed[b].stage; });
  for (int i : order) {
    FlatTensor t = listed[i];
    t.offset = L.size_;
    *slots[i] = t.offset;
    L.size_ += RoundUp(t.numel, kAlign);
    L.tensors_.push_back(std::move(t));
  }
  TieModel(c, L.model_);
  const int64_t d = c.d_model, ff = c.d_ff;
  VisitModel(MakeModelVisitor([](const TableInfo&, int64_t&) {},
                              [&](const Site&, const LinearGroup& g, FlatLinear& l) {
                                l.out = static_cast<int>(g.rows(d, ff));
                                l.in = static_cast<int>(g.cols(d, ff));
                              },
                              [](const Site&, const char*, FlatLayerNorm&) {}),
             c, L.model_);

  // Buckets: whole stages, closed once they hold bucket_bytes.
  GradBucket open;
  size_t next = 0;
  for (int st = 0; st < L.stages_.count(); ++st) {
    for (; next < L.tensors_.size() && L.tensors_[next].stage == st; ++next) {
      open.count = L.tensors_[next].offset + RoundUp(L.tensors_[next].numel, kAlign) - open.offset;
    }
    const bool last = st + 1 == L.stages_.count();
    if (open.count > 0 && (open.count * static_cast<int64_t>(sizeof(float)) >= bucket_bytes || last)) {
      open.last_stage = st;
      L.buckets_.push_back(open);
      open = GradBucket();
      open.offset = L.buckets_.back().offset + L.buckets_.back().count;
    }
  }
  return L;
}

absl::Status FlatLayout::Gather(const ModelConfig& c, const ModelWeights& w, float* flat) const {
  const std::vector<ParamRef> refs = TrainableParams(c, const_cast<ModelWeights*>(&w));
  std::memset(flat, 0, sizeof(float) * size_);
  for (const FlatTensor& t : tensors_) {
    if (t.param_index >= static_cast<int>(refs.size()) || refs[t.param_index].tensor->numel() != t.numel) {
      return absl::InvalidArgumentError(absl::StrCat("FlatLayout::Gather: ", t.name, " does not match the layout"));
    }
    std::memcpy(flat + t.offset, refs[t.param_index].tensor->f32(), sizeof(float) * t.numel);
  }
  return absl::OkStatus();
}

absl::Status FlatLayout::Scatter(const ModelConfig& c, const float* flat, ModelWeights* w) const {
  const std::vector<ParamRef> refs = TrainableParams(c, w);
  for (const FlatTensor& t : tensors_) {
    if (t.param_index >= static_cast<int>(refs.size()) || refs[t.param_index].tensor->numel() != t.numel) {
      return absl::InvalidArgumentError(absl::StrCat("FlatLayout::Scatter: ", t.name, " does not match the layout"));
    }
    std::memcpy(refs[t.param_index].tensor->f32(), flat + t.offset, sizeof(float) * t.numel);
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelWeights> FlatLayout::Views(const ModelConfig& c, const ModelWeights& like,
                                               const Tensor& flat) const {
  if (flat.dtype() != DType::kFloat32 || flat.numel() != size_) {
    return absl::InvalidArgumentError(absl::StrCat("FlatLayout::Views: the flat array is ", flat.ShapeString(),
                                                   ", the layout needs [", size_, "] float32"));
  }
  ModelWeights w = like;
  absl::Status status;
  FlatModel offsets = model_;
  VisitTrained(
      c,
      [&](const TensorAt& at, Tensor& t, int64_t& offset) {
        if (!status.ok()) return;
        if (offset < 0 || offset + t.numel() > size_) {
          status = absl::InvalidArgumentError(absl::StrCat("FlatLayout::Views: ", at.name, " is not in the layout"));
          return;
        }
        absl::StatusOr<Tensor> view = flat.Rows(offset, offset + t.numel()).Reshape(t.shape());
        if (!view.ok()) {
          status = view.status();
          return;
        }
        t = *std::move(view);
      },
      w, offsets);
  if (!status.ok()) return status;
  TieModel(c, w);
  return w;
}

}  // namespace tnmt::train
