// Translator: outputs in input order regardless of internal sorting and batch size; empty
// lines stay empty; invalid UTF-8 and over-long lines are per-line errors naming the line
// while the other lines are still translated; n-best.
#include "engine/runtime/translator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"

namespace tnmt {
namespace {

class TranslatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = LoadModelDirectory("tests/golden/data/tiny");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *m;
  }
  std::shared_ptr<const LoadedModel> model_;
};

TEST_F(TranslatorTest, OrderAndBatchSizeDoNotChangeOutputs) {
  const std::vector<std::string> lines = {"Das Haus ist rot.", "", "Hallo", "The old teacher closed the green door behind the school.",
                                          "über", "   ", "Zoë sieht den Hund!"};
  Translator t(model_);
  TranslationOptions big;
  auto a = t.Translate(lines, big);
  ASSERT_TRUE(a.ok());
  TranslationOptions small = big;
  small.max_batch_tokens = 1;  // one sentence per batch
  auto b = t.Translate(lines, small);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(a->size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    ASSERT_TRUE((*a)[i].ok());
    ASSERT_TRUE((*b)[i].ok());
    EXPECT_EQ((*a)[i]->hypotheses[0].text, (*b)[i]->hypotheses[0].text) << i;
    // Each line alone gives the same as inside the whole input.
    auto alone = t.Translate({lines[i]}, big);
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ((*alone)[0]->hypotheses[0].ids, (*a)[i]->hypotheses[0].ids) << i;
  }
  EXPECT_EQ((*a)[1]->hypotheses[0].text, "");
  EXPECT_EQ((*a)[5]->hypotheses[0].text, "");
  EXPECT_FALSE((*a)[0]->hypotheses[0].ids.empty());
}

// Sentences join the running decode as others finish (continuous batching): with a budget of
// a few sentences, most lines start while others are mid-decode, at other positions. Each
// line's hypotheses, ids and scores are still those of translating it alone.
TEST_F(TranslatorTest, SentencesJoiningMidDecodeKeepTheirOutputs) {
  const std::vector<std::string> words = {"Das", "Haus", "ist", "rot", "und", "der", "Hund", "läuft",
                                          "schnell", "über", "die", "Straße"};
  std::vector<std::string> lines;
  for (int i = 0; i < 24; ++i) {
    std::string line;
    for (int w = 0; w <= (i * 7) % 11; ++w) line += (w ? " " : "") + words[(i + 3 * w) % words.size()];
    lines.push_back(line);
  }
  Translator t(model_);
  for (int beam : {1, 4}) {
    TranslationOptions o;
    o.decode.beam_size = beam;
    o.decode.n_best = beam == 4 ? 2 : 1;
    o.max_batch_tokens = 40;  // 2-8 sentences at a time
    int calls = 0;
    auto r = t.Translate(lines, o, [&](int, int) { ++calls; });
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GT(calls, 3) << "sentences finished at several steps";
    for (size_t i = 0; i < lines.size(); ++i) {
      auto alone = t.Translate({lines[i]}, o);
      ASSERT_TRUE(alone.ok());
      ASSERT_TRUE((*r)[i].ok());
      ASSERT_EQ((*alone)[0]->hypotheses.size(), (*r)[i]->hypotheses.size()) << i;
      for (size_t h = 0; h < (*r)[i]->hypotheses.size(); ++h) {
        EXPECT_EQ((*alone)[0]->hypotheses[h].ids, (*r)[i]->hypotheses[h].ids) << "beam " << beam << " line " << i;
        EXPECT_EQ((*alone)[0]->hypotheses[h].score, (*r)[i]->hypotheses[h].score) << "beam " << beam << " line " << i;
      }
    }
  }
}

TEST_F(TranslatorTest, BadLinesAreErrorsNamingTheLine) {
  std::string long_line;
  for (int i = 0; i < 10000; ++i) long_line += "Haus ";
  const std::vector<std::string> lines = {"Hallo", std::string("bad \xff\xfe bytes"), long_line,
                                          "Straße", std::string("trunc \xe2\x82")};
  Translator t(model_);
  auto r = t.Translate(lines, TranslationOptions());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)[0].ok());
  ASSERT_FALSE((*r)[1].ok());
  EXPECT_NE((*r)[1].status().message().find("line 2"), std::string::npos) << (*r)[1].status();
  EXPECT_NE((*r)[1].status().message().find("UTF-8"), std::string::npos);
  ASSERT_FALSE((*r)[2].ok());
  EXPECT_NE((*r)[2].status().message().find("line 3"), std::string::npos);
  EXPECT_NE((*r)[2].status().message().find("maximum input length"), std::string::npos);
  EXPECT_TRUE((*r)[3].ok());
  EXPECT_FALSE((*r)[3]->hypotheses[0].ids.empty());
  EXPECT_FALSE((*r)[4].ok());
}

TEST_F(TranslatorTest, NBestAndProgress) {
  Translator t(model_);
  TranslationOptions o;
  o.decode.n_best = 3;
  o.max_batch_tokens = 8;
  std::vector<std::pair<int, int>> calls;
  auto r = t.Translate({"Hallo Welt", "", "Das Mädchen"}, o,
                       [&](int done, int total) { calls.emplace_back(done, total); });
  ASSERT_TRUE(r.ok());
  for (const auto& line : *r) ASSERT_EQ(line->hypotheses.size(), 3u);
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back(), std::make_pair(3, 3));
  o.decode.n_best = 9;
  EXPECT_FALSE(t.Translate({"x"}, o).ok());
}


// --compute-type int8: every linear quantized at load. A sentence's output and scores still do
// not depend on its batch, the thread count or the kernel path (the int8 kernels compute the
// same integers and the same float epilogue); the demo model's int8 translations of real
// captions stay those of float32, with scores within 0.1.
TEST(Int8TranslatorTest, OutputsDoNotDependOnBatchThreadsOrKernel) {
  Placement int8;
  int8.int8 = true;
  auto m = LoadModelDirectory("tests/golden/data/tiny", int8);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->weights.decoder[0].fc1.packed.is_int8());
  EXPECT_TRUE((*m)->weights.output_projection_packed.is_int8());
  const std::vector<std::string> lines = {"Das Haus ist rot.", "Hallo", "The old teacher closed the green door.",
                                          "Zoë sieht den Hund!", "über alles"};
  Translator t(*m);
  TranslationOptions big;
  kernels::cpu::SetBlasThreads(1);
  auto a = t.Translate(lines, big);
  ASSERT_TRUE(a.ok());
  TranslationOptions small = big;
  small.max_batch_tokens = 1;
  kernels::cpu::SetBlasThreads(2);
  auto b = t.Translate(lines, small);
  ASSERT_TRUE(b.ok());
  for (size_t i = 0; i < lines.size(); ++i) {
    ASSERT_TRUE((*a)[i].ok() && (*b)[i].ok()) << i;
    EXPECT_EQ((*a)[i]->hypotheses[0].ids, (*b)[i]->hypotheses[0].ids) << i;
    EXPECT_EQ((*a)[i]->hypotheses[0].score, (*b)[i]->hypotheses[0].score) << i;
  }
  for (auto isa : {kernels::cpu::CpuIsa::kAvx2, kernels::cpu::CpuIsa::kPortable}) {
    if (isa > kernels::cpu::DetectedIsa()) continue;
    kernels::cpu::SetIsaForTesting(isa);
    auto c = t.Translate(lines, big);
    kernels::cpu::SetIsaForTesting(kernels::cpu::CpuIsa::kAvx512);
    ASSERT_TRUE(c.ok());
    // The int8 GEMMs agree bit for bit; attention and layer norm have their own per-path
    // code, so the float parts may round differently on the portable path: ids must match,
    // scores within 1e-4.
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ((*a)[i]->hypotheses[0].ids, (*c)[i]->hypotheses[0].ids) << i << " " << kernels::cpu::IsaName(isa);
      EXPECT_NEAR((*a)[i]->hypotheses[0].score, (*c)[i]->hypotheses[0].score, 1e-4) << i;
    }
  }
  kernels::cpu::SetBlasThreads(1);
}

TEST(Int8TranslatorTest, DemoModelStaysCloseToFloat32) {
  std::ifstream in("tests/convert/data/captions.en");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 20u);
  Placement int8;
  int8.int8 = true;
  auto f = LoadModelDirectory("models/demo");
  auto q = LoadModelDirectory("models/demo", int8);
  ASSERT_TRUE(f.ok() && q.ok());
  EXPECT_LT((*q)->weights.PackedBytes() * 3, (*f)->weights.PackedBytes() + 1)
      << "int8 packs take about a quarter of float32's";
  auto a = Translator(*f).Translate(lines, TranslationOptions());
  auto b = Translator(*q).Translate(lines, TranslationOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  int same = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    ASSERT_TRUE((*a)[i].ok() && (*b)[i].ok());
    const TextHypothesis& x = (*a)[i]->hypotheses[0];
    const TextHypothesis& y = (*b)[i]->hypotheses[0];
    if (x.text != y.text) continue;
    ++same;
    EXPECT_LE(std::fabs(x.score - y.score), 0.1) << lines[i] << ": " << x.text;
    EXPECT_NE(x.score, y.score) << "int8 scores are never exactly float32's: is int8 on?";
  }
  EXPECT_GE(same, 17) << "int8 changed more than 3 of 20 translations";
}

}  // namespace
}  // namespace tnmt
