// Flat parameter layout and gradient buckets; see flat_layout.h.
#include "trainer/model/flat_layout.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "trainer/model/parameters.h"

namespace tnmt::train {

namespace {

int64_t RoundUp(int64_t n, int64_t align) { return (n + align - 1) / align * align; }

// Calls f(tensor, stage, slot) for every tensor field of `w` with the stage that uses it and
// the FlatModel offset that describes it.
template <typename F>
void VisitFields(const ModelWeights& w, const BackwardStages& s, FlatModel* m, F f) {
  auto linear = [&](const Linear& l, int stage, FlatLinear* fl) {
    f(l.weight, stage, &fl->weight);
    f(l.bias, stage, &fl->bias);
    fl->out = static_cast<int>(l.weight.dim(0));
    fl->in = static_cast<int>(l.weight.dim(1));
  };
  auto ln = [&](const LayerNormWeights& l, int stage, FlatLayerNorm* fl) {
    f(l.gamma, stage, &fl->gamma);
    f(l.beta, stage, &fl->beta);
  };
  auto layer = [&](int stage) {
    return MakeParamVisitor(
        [&, stage](const LinearGroup&, const Linear& l, FlatLinear& fl) { linear(l, stage, &fl); },
        [&, stage](const char*, const LayerNormWeights& l, FlatLayerNorm& fl) { ln(l, stage, &fl); });
  };
  f(w.output_projection, s.output(), &m->output_projection);
  ln(w.decoder_final_ln, s.decoder_final_ln(), &m->decoder_final_ln);
  m->decoder.resize(w.decoder.size());
  for (int i = static_cast<int>(w.decoder.size()) - 1; i >= 0; --i) {
    VisitDecoderLayer(layer(s.decoder_layer(i)), w.decoder[i], m->decoder[i]);
  }
  f(w.decoder_embed, s.decoder_embed(), &m->decoder_embed);
  f(w.decoder_positions, s.decoder_embed(), &m->decoder_positions);
  ln(w.encoder_final_ln, s.encoder_final_ln(), &m->encoder_final_ln);
  m->encoder.resize(w.encoder.size());
  for (int i = static_cast<int>(w.encoder.size()) - 1; i >= 0; --i) {
    VisitEncoderLayer(layer(s.encoder_layer(i)), w.encoder[i], m->encoder[i]);
  }
  f(w.encoder_embed, s.encoder_embed(), &m->encoder_embed);
  f(w.encoder_positions, s.encoder_embed(), &m->encoder_positions);
}

}  // namespace

absl::StatusOr<FlatLayout> FlatLayout::Create(const ModelConfig& c, const ModelWeights& w, int64_t bucket_bytes) {
  FlatLayout L;
  L.stages_.encoder_layers = static_cast<int>(w.encoder.size());
  L.stages_.decoder_layers = static_cast<int>(w.decoder.size());
  const std::vector<ParamRef> refs = TrainableParams(c, const_cast<ModelWeights*>(&w));
  std::map<const void*, int> index_of;
  for (size_t i = 0; i < refs.size(); ++i) index_of[refs[i].tensor->data<void>()] = static_cast<int>(i);

  // The stage of each tensor: its last use in the backward.
  std::vector<int> stage(refs.size(), -1);
  FlatModel scratch;
  VisitFields(w, L.stages_, &scratch, [&](const Tensor& t, int st, int64_t*) {
    if (t.empty()) return;
    auto it = index_of.find(t.data<void>());
    if (it != index_of.end()) stage[it->second] = std::max(stage[it->second], st);
  });
  std::vector<int> order(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    if (stage[i] < 0) return absl::InternalError(absl::StrCat("FlatLayout: ", refs[i].name, " is used by no stage"));
    order[i] = static_cast<int>(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return stage[a] < stage[b]; });

  std::map<const void*, int64_t> offset_of;
  for (int i : order) {
    FlatTensor t;
    t.name = refs[i].name;
    t.param_index = i;
    t.offset = L.size_;
    t.numel = refs[i].tensor->numel();
    t.stage = stage[i];
    offset_of[refs[i].tensor->data<void>()] = t.offset;
    L.size_ += RoundUp(t.numel, kAlign);
    L.tensors_.push_back(std::move(t));
  }
  VisitFields(w, L.stages_, &L.model_, [&](const Tensor& t, int, int64_t* slot) {
    if (t.empty()) return;
    auto it = offset_of.find(t.data<void>());
    if (it != offset_of.end()) *slot = it->second;
  });

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

}  // namespace tnmt::train
