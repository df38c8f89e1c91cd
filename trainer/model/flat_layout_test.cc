// FlatLayout on every tiny model variant: tensors aligned, disjoint and covering the array;
// stages in backward order (shared embeddings last, an unshared output projection first);
// buckets contiguous, covering, closing at stage boundaries, each tensor final by its bucket's
// last stage; FlatModel offsets point at the right data; Gather/Scatter round-trip exactly;
// Views are ModelWeights over the flat array (writes land at the layout's offsets, tied tables
// share one view, untrained tensors stay the template's).
// The layout of the tiny variants is pinned: it is part of the checkpoint format of optimizer
// state.
#include "trainer/model/flat_layout.h"

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "trainer/model/parameters.h"
#include "trainer/model/train_test_util.h"

namespace tnmt::train {
namespace {

TEST(FlatLayoutTest, LayoutStagesAndBuckets) {
  for (const auto& variant : testing::TinyVariants()) {
    SCOPED_TRACE(variant.name);
    const ModelConfig& c = variant.config;
    auto w = InitializeWeights(c, 3);
    ASSERT_TRUE(w.ok());
    for (int64_t bucket_bytes : {int64_t{1}, int64_t{20000}, int64_t{1} << 40}) {
      auto L = FlatLayout::Create(c, *w, bucket_bytes);
      ASSERT_TRUE(L.ok()) << L.status();
      const auto refs = TrainableParams(c, &*w);
      ASSERT_EQ(L->tensors().size(), refs.size());
      std::vector<bool> seen(refs.size(), false);
      int64_t end = 0;
      int prev_stage = 0;
      for (const FlatTensor& t : L->tensors()) {
        EXPECT_EQ(t.offset % FlatLayout::kAlign, 0) << t.name;
        EXPECT_GE(t.offset, end) << t.name;
        EXPECT_LT(t.offset - end, FlatLayout::kAlign) << t.name;
        EXPECT_GE(t.stage, prev_stage) << t.name;
        ASSERT_FALSE(seen[t.param_index]) << t.name;
        seen[t.param_index] = true;
        EXPECT_EQ(t.name, refs[t.param_index].name);
        EXPECT_EQ(t.numel, refs[t.param_index].tensor->numel());
        end = t.offset + t.numel;
        prev_stage = t.stage;
      }
      EXPECT_GE(L->size(), end);
      EXPECT_LT(L->size() - end, FlatLayout::kAlign);

      const BackwardStages& s = L->stages();
      for (const FlatTensor& t : L->tensors()) {
        if (t.name == "encoder.embed_tokens.weight") {
          EXPECT_EQ(t.stage, s.encoder_embed());
        }
        if (t.name == "decoder.embed_tokens.weight") {
          EXPECT_EQ(t.stage, s.decoder_embed());
        }
        if (t.name == "decoder.output_projection.weight") {
          EXPECT_EQ(t.stage, s.output());
        }
        if (t.name == "decoder.layers.0.fc1.weight") {
          EXPECT_EQ(t.stage, s.decoder_layer(0));
        }
        if (t.name == "encoder.layers.0.fc1.weight") {
          EXPECT_EQ(t.stage, s.encoder_layer(0));
        }
      }
      EXPECT_EQ(s.decoder_layer(c.decoder_layers - 1), s.decoder_final_ln() + 1);
      EXPECT_EQ(s.decoder_layer(0), s.decoder_embed() - 1);
      EXPECT_LT(s.decoder_embed(), s.encoder_layer(c.encoder_layers - 1));

      int64_t off = 0;
      int last = -1;
      for (const GradBucket& b : L->buckets()) {
        EXPECT_EQ(b.offset, off);
        EXPECT_GT(b.count, 0);
        EXPECT_GT(b.last_stage, last);
        off += b.count;
        last = b.last_stage;
        for (const FlatTensor& t : L->tensors()) {
          if (t.offset >= b.offset && t.offset < b.offset + b.count) {
            EXPECT_LE(t.stage, b.last_stage) << t.name;
            EXPECT_LE(t.offset + t.numel, b.offset + b.count) << t.name;
            if (&b != &L->buckets().front()) {
              EXPECT_GT(t.stage, (&b - 1)->last_stage) << t.name;
            }
          }
        }
      }
      EXPECT_EQ(off, L->size());
      if (bucket_bytes == (int64_t{1} << 40)) {
        EXPECT_EQ(L->buckets().size(), 1u);
      }
      if (bucket_bytes == 1) {
        EXPECT_GT(L->buckets().size(), static_cast<size_t>(c.encoder_layers + c.decoder_layers));
      }

      // Offsets of FlatModel point at the right tensors; Gather/Scatter round-trip.
      std::vector<float> flat(L->size(), -1.0f);
      ASSERT_TRUE(L->Gather(c, *w, flat.data()).ok());
      const FlatModel& m = L->model();
      auto same = [&](int64_t offset, const Tensor& t) {
        ASSERT_GE(offset, 0);
        for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(flat[offset + i], t.f32()[i]);
      };
      same(m.encoder_embed, w->encoder_embed);
      same(m.decoder_embed, w->decoder_embed);
      same(m.output_projection, w->output_projection);
      same(m.decoder[0].cross_kv.weight, w->decoder[0].cross_kv.weight);
      same(m.decoder[0].fc2.bias, w->decoder[0].fc2.bias);
      same(m.encoder[c.encoder_layers - 1].final_ln.gamma, w->encoder[c.encoder_layers - 1].final_ln.gamma);
      EXPECT_EQ(m.decoder[0].self_qkv.out, 3 * c.d_model);
      EXPECT_EQ(m.decoder[0].fc1.out, c.d_ff);
      EXPECT_EQ(m.decoder[0].fc1.in, c.d_model);
      if (c.position_encoding == PositionEncoding::kLearned) {
        same(m.encoder_positions, w->encoder_positions);
      } else {
        EXPECT_EQ(m.encoder_positions, -1);
        EXPECT_EQ(m.decoder_positions, -1);
      }
      EXPECT_EQ(m.encoder_final_ln.gamma >= 0, c.normalize_before);
      EXPECT_EQ(m.encoder_embed == m.decoder_embed, c.share_embeddings);
      EXPECT_EQ(m.decoder_embed == m.output_projection, c.share_decoder_input_output_embed);

      auto back = ZerosLike(c, *w);
      ASSERT_TRUE(back.ok());
      ASSERT_TRUE(L->Scatter(c, flat.data(), &*back).ok());
      EXPECT_TRUE(testing::BitIdentical(c, *back, *w));
      for (size_t t = 0; t + 1 < L->tensors().size(); ++t) {
        const FlatTensor& a = L->tensors()[t];
        for (int64_t i = a.offset + a.numel; i < L->tensors()[t + 1].offset; ++i) ASSERT_EQ(flat[i], 0.0f);
      }
    }
  }
}

// FNV-1a (64 bits) of a text.
uint64_t HashText(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

std::string Describe(const FlatLinear& l) {
  std::ostringstream o;
  o << l.weight << ' ' << l.bias << ' ' << l.out << ' ' << l.in << ';';
  return o.str();
}
std::string Describe(const FlatLayerNorm& n) {
  std::ostringstream o;
  o << n.gamma << ' ' << n.beta << ';';
  return o.str();
}

TEST(FlatLayoutTest, ViewsAreTheFlatArray) {
  for (const auto& variant : testing::TinyVariants()) {
    SCOPED_TRACE(variant.name);
    const ModelConfig& c = variant.config;
    auto w = InitializeWeights(c, 5);
    ASSERT_TRUE(w.ok());
    auto L = FlatLayout::Create(c, *w, int64_t{1} << 20);
    ASSERT_TRUE(L.ok()) << L.status();
    auto flat = Tensor::Zeros({L->size()});
    ASSERT_TRUE(flat.ok());
    ASSERT_TRUE(L->Gather(c, *w, flat->f32()).ok());
    auto views = L->Views(c, *w, *flat);
    ASSERT_TRUE(views.ok()) << views.status();
    // Same values and shapes as the source, every trainable tensor inside the flat array.
    auto src = TrainableParams(c, &*w);
    auto got = TrainableParams(c, &*views);
    ASSERT_EQ(src.size(), got.size());
    const float* begin = flat->f32();
    for (size_t i = 0; i < src.size(); ++i) {
      EXPECT_EQ(got[i].tensor->shape(), src[i].tensor->shape()) << got[i].name;
      const float* p = got[i].tensor->f32();
      EXPECT_TRUE(p >= begin && p + got[i].tensor->numel() <= begin + L->size()) << got[i].name;
      EXPECT_EQ(0, std::memcmp(p, src[i].tensor->f32(), sizeof(float) * src[i].tensor->numel())) << got[i].name;
    }
    // A write through a view is a write to the array at the layout's offset.
    for (const FlatTensor& t : L->tensors()) {
      got[t.param_index].tensor->f32()[t.numel - 1] = 1000.0f + t.param_index;
      EXPECT_EQ(flat->f32()[t.offset + t.numel - 1], 1000.0f + t.param_index) << t.name;
    }
    // Tied tables are one view; the sinusoid tables are the template's.
    if (c.share_embeddings) EXPECT_EQ(views->decoder_embed.f32(), views->encoder_embed.f32());
    if (c.share_decoder_input_output_embed) EXPECT_EQ(views->output_projection.f32(), views->decoder_embed.f32());
    if (c.position_encoding == PositionEncoding::kSinusoidal) {
      EXPECT_EQ(views->encoder_positions.f32(), w->encoder_positions.f32());
    }
  }
  auto w = InitializeWeights(testing::TinyVariants()[0].config, 5);
  ASSERT_TRUE(w.ok());
  auto L = FlatLayout::Create(testing::TinyVariants()[0].config, *w, 1);
  ASSERT_TRUE(L.ok());
  auto small = Tensor::Zeros({L->size() - 1});
  ASSERT_TRUE(small.ok());
  auto bad = L->Views(testing::TinyVariants()[0].config, *w, *small);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("the layout needs"), std::string::npos) << bad.status();
}

TEST(FlatLayoutTest, OffsetsArePinned) {
  struct Pinned {
    int64_t size;
    uint64_t tensors, model, buckets;
  };
  const std::vector<Pinned> pinned = {
      {41024, 3920481694937655774ull, 10952046417441258195ull, 1370119304555221168ull},
      {43392, 8478109523341729905ull, 16705557449942725528ull, 7076572261996971710ull},
      {42240, 13395694009020036323ull, 1161347474359013178ull, 15514799791911020653ull},
  };
  const auto variants = testing::TinyVariants();
  ASSERT_EQ(variants.size(), pinned.size());
  for (size_t v = 0; v < variants.size(); ++v) {
    SCOPED_TRACE(variants[v].name);
    const ModelConfig& c = variants[v].config;
    auto w = InitializeWeights(c, 3);
    ASSERT_TRUE(w.ok());
    auto L = FlatLayout::Create(c, *w, 20000);
    ASSERT_TRUE(L.ok()) << L.status();
    std::ostringstream tensors, model, buckets;
    for (const FlatTensor& t : L->tensors()) {
      tensors << t.name << ' ' << t.param_index << ' ' << t.offset << ' ' << t.numel << ' ' << t.stage << '\n';
    }
    const FlatModel& m = L->model();
    model << m.encoder_embed << ' ' << m.decoder_embed << ' ' << m.output_projection << ' '
          << m.encoder_positions << ' ' << m.decoder_positions << ';';
    auto layer = MakeParamVisitor([&](const LinearGroup&, const FlatLinear& l) { model << Describe(l); },
                                  [&](const char*, const FlatLayerNorm& n) { model << Describe(n); });
    for (const FlatEncoderLayer& l : m.encoder) VisitEncoderLayer(layer, l);
    for (const FlatDecoderLayer& l : m.decoder) VisitDecoderLayer(layer, l);
    model << Describe(m.encoder_final_ln) << Describe(m.decoder_final_ln);
    for (const GradBucket& b : L->buckets()) buckets << b.offset << ' ' << b.count << ' ' << b.last_stage << ';';
    EXPECT_EQ(L->size(), pinned[v].size);
    EXPECT_EQ(HashText(tensors.str()), pinned[v].tensors) << tensors.str();
    EXPECT_EQ(HashText(model.str()), pinned[v].model) << model.str();
    EXPECT_EQ(HashText(buckets.str()), pinned[v].buckets) << buckets.str();
  }
}

}  // namespace
}  // namespace tnmt::train
