// Translator: outputs in input order regardless of internal sorting and batch size; empty
// lines stay empty; invalid UTF-8 and over-long lines are per-line errors naming the line
// while the other lines are still translated; n-best.
#include "engine/runtime/translator.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tnmt
