// Pins what initialisation and the parameter views produce for the tiny model variants: the
// trainable tensors' names and order (the order of params, gradients and Adam moments), a
// hash of InitializeWeights' bits for a fixed seed (the same seed must give the same model on
// every build), the tensors a model file holds (names, shapes, bits) and the bytes held.
#include "trainer/model/parameters.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_join.h"
#include "trainer/model/train_test_util.h"

namespace tnmt::train {
namespace {

// FNV-1a, 64 bits.
struct Hash {
  uint64_t h = 1469598103934665603ull;
  void Bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  void Str(const std::string& s) { Bytes(s.data(), s.size() + 1); }
  void Int(int64_t v) { Bytes(&v, sizeof v); }
  void Floats(const Tensor& t) { Bytes(t.f32(), sizeof(float) * t.numel()); }
};

struct Pinned {
  uint64_t names, init, file;
  int64_t count, bytes;
};

TEST(ParametersTest, InitializationAndViewsArePinned) {
  const std::vector<Pinned> pinned = {
      {5629152131731970975ull, 4492781520136104699ull, 5502368086534131364ull, 39776, 683392},
      {14113132337014337256ull, 13360941710659636528ull, 1101618919808647997ull, 42080, 168320},
      {7273223181036368627ull, 2900253403225850669ull, 10837337640164314591ull, 40960, 688128},
  };
  const auto variants = testing::TinyVariants();
  ASSERT_EQ(variants.size(), pinned.size());
  for (size_t v = 0; v < variants.size(); ++v) {
    SCOPED_TRACE(variants[v].name);
    const ModelConfig& c = variants[v].config;
    absl::StatusOr<ModelWeights> w = InitializeWeights(c, 7);
    ASSERT_TRUE(w.ok()) << w.status();
    Hash names, init, file;
    std::vector<std::string> listed;
    for (const ParamRef& p : TrainableParams(c, &*w)) {
      names.Str(p.name);
      init.Str(p.name);
      init.Floats(*p.tensor);
      listed.push_back(p.name);
    }
    for (const auto& [name, t] : w->ToTensors(c)) {
      file.Str(name);
      for (int64_t d : t.shape()) file.Int(d);
      file.Floats(t);
    }
    file.Floats(w->encoder_positions);
    file.Floats(w->decoder_positions);
    const int64_t count = ParameterCount(c, &*w);
    EXPECT_EQ(names.h, pinned[v].names) << absl::StrJoin(listed, " ");
    EXPECT_EQ(init.h, pinned[v].init);
    EXPECT_EQ(file.h, pinned[v].file);
    EXPECT_EQ(count, pinned[v].count);
    EXPECT_EQ(w->Bytes(c), pinned[v].bytes);
    // Ties: the same storage, as the config says.
    EXPECT_EQ(w->encoder_embed.f32() == w->decoder_embed.f32(), c.share_embeddings);
    EXPECT_EQ(w->decoder_embed.f32() == w->output_projection.f32(), c.share_decoder_input_output_embed);
    EXPECT_EQ(w->encoder_positions.f32() == w->decoder_positions.f32(),
              c.position_encoding == PositionEncoding::kSinusoidal);
    // The pad rows of the token tables are zero.
    for (const Tensor* t : {&w->encoder_embed, &w->decoder_embed, &w->output_projection}) {
      for (int i = 0; i < c.d_model; ++i) EXPECT_EQ(t->f32()[c.pad_id * c.d_model + i], 0.0f);
    }
  }
}

}  // namespace
}  // namespace tnmt::train
